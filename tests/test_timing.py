"""dplab.timing: the interleaved loop that labs and benchmarks share."""
import time

import pytest

from dplab.timing import interleaved, time_repeats


def test_interleaved_takes_turns_and_keeps_only_timed_repeats():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    out = interleaved(fns, repeats=3, warmup=2, before=lambda k: calls.append(f"before {k}"),
                      after=lambda k: calls.append(f"after {k}"))
    assert calls == ["before a", "a", "after a", "before b", "b", "after b"] * 5
    assert {k: v.shape for k, v in out.items()} == {"a": (3,), "b": (3,)}


def test_before_and_after_are_not_timed_but_sync_is():
    nap = 0.05
    out = interleaved({"f": lambda: None}, repeats=3, warmup=0,
                      before=lambda k: time.sleep(nap), after=lambda k: time.sleep(nap))
    assert out["f"].max() < nap
    out = interleaved({"f": lambda: None}, repeats=3, warmup=0, sync=lambda: time.sleep(nap))
    assert out["f"].min() >= nap


def test_time_repeats_times_one_function():
    t = time_repeats(lambda: time.sleep(0.01), repeats=4, warmup=1)
    assert t.shape == (4,) and t.min() >= 0.01


def test_timing_arguments_refuse_impossible_counts_before_anything_starts(capsys):
    import argparse

    from dplab.timing import timing_arguments

    args = timing_arguments(argparse.ArgumentParser(), ranks=3, argv=["--repeats", "2"])
    assert (args.ranks, args.repeats, args.warmup) == (3, 2, 3)
    for bad in (["--ranks", "0"], ["--repeats", "0"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            timing_arguments(argparse.ArgumentParser(), ranks=3, argv=bad)
        assert "must be at least" in capsys.readouterr().err


def test_median_se_matches_the_spread_of_medians_and_ignores_an_outlier():
    import numpy as np

    from dplab.timing import median_se

    rng = np.random.default_rng(0)
    draws = rng.normal(10.0, 2.0, size=(4000, 15))
    seen = np.std(np.median(draws, axis=1))        # the medians' spread, measured
    estimates = [median_se(d) for d in draws[:200]]
    assert 0.8 * seen < np.median(estimates) < 1.2 * seen
    d = draws[0].copy()
    d[0] = 1e6                                      # one very slow repeat
    assert median_se(d) < 2 * median_se(draws[0])
    assert median_se(draws[0], relative=True) == pytest.approx(
        median_se(draws[0]) / np.median(draws[0]))


def test_the_side_file_keeps_a_check_with_its_band_and_a_measurement_as_printed_only(tmp_path, monkeypatch):
    """make test-load's table: a timing check with its value and band, a printed timing as
    printed only; nothing is kept where the lab has no artifacts/ folder (a test's run)."""
    import json

    from booktools.run import band_text
    from dplab import timing

    monkeypatch.chdir(tmp_path)
    assert timing.in_band("c", 3.0, 0.5, 2.0) is False and timing.measured("m", 0.25) == 0.25
    assert not (tmp_path / timing.BANDS_FILE).exists()
    (tmp_path / "artifacts").mkdir()
    timing.in_band("c", 3.0, 0.5, 2.0)
    timing.measured("m", 0.25)
    kept = json.loads((tmp_path / timing.BANDS_FILE).read_text())
    assert band_text(kept["c"]) == "3 OUT of [0.5, 2]"
    assert band_text(kept["m"]) == "0.25 printed only"
