"""make test-torch TORCH=X.Y.Z: a bad or unsupported TORCH stops before anything is installed, with
what to do; a good one runs nbval with that torch first on PYTHONPATH for kernels and engines."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import torch_release  # noqa: E402

ROOM = 100 * 2**30


@pytest.mark.parametrize("value, says", [
    ("", "not a release number"), ("2.8", "not a release number"), ("latest", "not a release number"),
    ("2.8.0+cu128", "not a release number"), ("2.7.1", "older than the book supports"),
    ("2.16.0", "newer than the book has been checked on"),
])
def test_bad_or_unsupported_torch_is_refused_with_what_to_do(value, says):
    why = torch_release.problem(value, ROOM)
    assert why is not None and says in why, why


def test_supported_releases_pass_and_a_full_disk_is_refused():
    assert torch_release.problem("2.8.0", ROOM) is None
    assert torch_release.problem("2.15.0", ROOM) is None
    assert "free disk" in torch_release.problem("2.15.0", 2**30)


@pytest.mark.parametrize("value", ["2.7.1", "abc", ""])
def test_make_refuses_before_installing_anything(value, tmp_path):
    out = subprocess.run(["make", "test-torch", f"TORCH={value}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0
    assert "make test-torch:" in out.stderr, out.stderr
    assert "pip install" not in out.stdout and "--nbval" not in out.stdout
    assert not (ROOT / ".torch" / value).exists() or value == ""


def test_the_nbval_pass_puts_that_torch_first_on_pythonpath(tmp_path):
    for on, other, beside in (("this-cpu", False, False), ("other-cpu", True, False),
                              ("two-learners", False, True)):
        out = subprocess.run(["make", "-n", "test-torch", "TORCH=2.8.0", f"ON={on}",
                              f"VENV={tmp_path / 'fresh-venv'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        nbval = out.stdout[out.stdout.index("PYTHONPATH="):]
        assert f"PYTHONPATH={ROOT}/.torch/2.8.0" in nbval and "DPLAB_DEVICE=cpu" in nbval
        assert ("ATEN_CPU_CAPABILITY=default" in nbval and "busy_core.py" in nbval) == other
        assert ("second_learner.py" in nbval) == beside


def test_the_readme_states_the_supported_range():
    from dplab.compat import SUPPORTED, supported_range

    low, newest = supported_range()
    readme = (ROOT / "README.md").read_text()
    assert f"The labs support torch {low} to {newest}" in readme and f"`{SUPPORTED}`" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "supported_range()" in ci, ".ci/run must take the lowest and newest from dplab.compat"


def test_the_recorded_verdict_is_nbvals_and_the_second_learners(tmp_path, monkeypatch):
    log = tmp_path / "log"
    log.write_text("second learner: 04_ddp.ipynb: ok (40 s)\n"
                   "=================== 293 passed in 310.44s (0:05:10) ===================\n"
                   "second learner: the command ended (ok); waiting\n"
                   "second learner: 7 passed, 1 failed (07_sharding.ipynb)\n")
    monkeypatch.setattr(torch_release, "RESULTS", tmp_path / "test_torch.txt")
    monkeypatch.setattr(torch_release, "ROOT", tmp_path)
    torch_release.record("2.15.0", "two-learners", log)
    m = torch_release.RESULT_LINE.match((tmp_path / "test_torch.txt").read_text().splitlines()[0])
    assert m["verdict"] == ("293 passed in 310.44s (0:05:10); "
                            "second learner: 7 passed, 1 failed (07_sharding.ipynb)"), m["verdict"]
    log.write_text("1 failed, 292 passed in 300.00s\n")
    torch_release.record("2.8.0", "other-cpu", log)
    assert "torch 2.8.0 on other-cpu: 1 failed, 292 passed in 300.00s |" in (tmp_path / "test_torch.txt").read_text()


def test_the_book_build_leaves_out_the_installed_releases_and_wheels():
    # Without it, make test-book after make test-torch read the READMEs of torch's NVIDIA
    # libraries in .torch/ as pages, and -W failed on their headings.
    import yaml

    excluded = yaml.safe_load((ROOT / "_config.yml").read_text())["exclude_patterns"]
    assert ".torch" in excluded and ".whl" in excluded, excluded
