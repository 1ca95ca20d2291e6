"""booktools.releases and the condition torch=X.Y.Z (make test-torch TORCH=X.Y.Z): a bad or
unsupported release is refused before anything is installed, with what to do; a good one goes
into .torch/X.Y.Z/ and first on PYTHONPATH for the nbval pass; its verdict is recorded in the
format the intro page reads."""
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from booktools import releases
from booktools.conditions import Refused, parse
from booktools.learners import Row
from booktools.run import Outcome, main, record
from tests.support import make

ROOT = Path(__file__).resolve().parent.parent
ROOM = 100 * 2**30


@pytest.mark.parametrize("value, says", [
    ("", "not a release number"), ("2.8", "not a release number"), ("latest", "not a release number"),
    ("2.8.0+cu128", "not a release number"), ("2.7.1", "older than the book supports"),
    ("2.16.0", "newer than the book has been checked on"),
])
def test_bad_or_unsupported_torch_is_refused_with_what_to_do(value, says):
    why = releases.problem(value, ROOM)
    assert why is not None and says in why, why
    with pytest.raises(Refused, match=says):
        parse(f"torch={value}")


def test_supported_releases_pass_and_a_full_disk_is_refused():
    assert releases.problem("2.8.0", ROOM) is None
    assert releases.problem("2.15.0", ROOM) is None
    assert "free disk" in releases.problem("2.15.0", 2**30)


@pytest.mark.parametrize("value", ["2.7.1", "abc", ""])
def test_make_refuses_before_installing_anything(value, tmp_path):
    out = make.run("test-torch", f"TORCH={value}", timeout=120)
    assert out.returncode != 0
    assert (f"torch={value}:" if value else "make test-torch:") in out.stderr, out.stderr
    assert "installing" not in out.stdout and "nbval over" not in out.stdout
    assert not (ROOT / ".torch" / value).exists() or value == ""


def test_the_nbval_pass_puts_that_torch_first_on_pythonpath(tmp_path, capsys):
    for on, spec in (("this-cpu", "torch=2.8.0"), ("other-cpu", "torch=2.8.0,other-cpu,busy"),
                     ("two-learners", "torch=2.8.0,two=3")):
        out = make.run("-n", "test-torch", "TORCH=2.8.0", f"ON={on}", f"VENV={tmp_path / 'fresh-venv'}")
        assert out.returncode == 0, out.stderr
        assert f'-m booktools.run --on "{spec}" ' in out.stdout, out.stdout
    assert main(["--plan", "--on", "torch=2.8.0,other-cpu,busy torch=2.8.0,two=3", "--labs", "00"]) == 0
    other, two = capsys.readouterr().out.split("\ntorch=2.8.0,two=3: ")
    for said in (other, two):
        assert "nbval over" in said and "DPLAB_DEVICE=cpu" in said
        assert f"PYTHONPATH={ROOT}/.torch/2.8.0" in said, said
    assert "ATEN_CPU_CAPABILITY=default" in other and "busy:" in other and "second learner" in two


def test_the_install_puts_the_release_in_its_own_folder_past_any_pip_configuration(monkeypatch, tmp_path):
    cmd, env = releases.install_command("2.8.0")
    assert cmd[-3:] == ["--target", str(ROOT / ".torch" / "2.8.0"), "torch==2.8.0"], cmd
    assert env["PIP_CONFIG_FILE"] == os.devnull and env["PIP_CONSTRAINT"] == ""
    # a pip that fails leaves no half-installed folder behind, and says what to check
    monkeypatch.setattr(releases, "RELEASES", tmp_path)
    monkeypatch.setattr(releases, "ROOT", tmp_path)
    monkeypatch.setattr(releases, "install_command", lambda version: ([sys.executable, "-c", (
        f"import os, sys; os.makedirs({str(tmp_path / '2.8.0' / 'torch')!r}); sys.exit(1)")], dict(os.environ)))
    with pytest.raises(SystemExit, match="pip could not install torch==2.8.0"):
        releases.install("2.8.0", say=lambda line: None)
    assert not (tmp_path / "2.8.0").exists() and not releases.installed("2.8.0")


def test_two_installs_of_one_release_at_once_run_pip_once_and_a_wait_is_bounded(monkeypatch, tmp_path):
    """.ci/run installs its releases beside make test, whose lab pass may need one still being
    installed: the second install waits for the first (it would otherwise remove the folder the
    first is unpacking into), then finds the release installed; pip ran once. A wait is bounded,
    and says why it ends."""
    monkeypatch.setattr(releases, "RELEASES", tmp_path)
    monkeypatch.setattr(releases, "ROOT", tmp_path)
    runs = tmp_path / "pip-runs"
    # a pip that takes a second and counts its runs
    monkeypatch.setattr(releases, "install_command", lambda version: ([sys.executable, "-c", (
        f"import os, time; os.makedirs({str(tmp_path / version)!r}, exist_ok=True); time.sleep(1); "
        f"open({str(runs)!r}, 'a').write('run\\n')")], dict(os.environ)))
    said = []
    with releases.only_installer("2.9.1"):  # another process's install under way
        other = threading.Thread(target=releases.install, args=("2.9.1", said.append))
        other.start()
        time.sleep(1.5)
        assert other.is_alive() and said == ["torch=2.9.1: another process is installing it; waiting for that"]
        releases._install("2.9.1", tmp_path / "2.9.1", said.append)
    other.join(timeout=30)
    assert not other.is_alive() and runs.read_text() == "run\n" and releases.installed("2.9.1")
    with releases.only_installer("2.10.0"):
        t0 = time.monotonic()
        with pytest.raises(SystemExit, match="another process has been installing it for over 1 s"):
            with releases.only_installer("2.10.0", say=lambda line: None, wait_s=1):
                pass
        assert time.monotonic() - t0 < 5


def test_the_readme_states_the_supported_range():
    from dplab.compat import SUPPORTED, supported_range

    low, newest = supported_range()
    readme = (ROOT / "README.md").read_text()
    assert f"The labs support torch {low} to {newest}" in readme and f"`{SUPPORTED}`" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "booktools.releases --ends" in ci, ".ci/run must take the lowest and newest from booktools.releases"
    first, last = releases.ends()
    assert first.startswith(f"{low}.") and last.startswith(f"{newest}."), \
        "booktools.releases.ends() must follow dplab.compat.supported_range()"


def test_the_recorded_verdict_is_nbvals_and_the_second_learners(tmp_path):
    results = tmp_path / "test_torch.txt"
    learner = [Row("04_ddp.ipynb", "x: second learner", "ok (40 s)"),
               Row("07_sharding.ipynb", "x: second learner", "FAIL code cell 3: AssertionError")]
    outcome = Outcome(learner, False, "293 passed in 310.44s (0:05:10); second learner: 1 passed, 1 failed "
                      "(07_sharding.ipynb)")
    record(parse("torch=2.15.0,two=3"), outcome, results)
    m = releases.RESULT_LINE.match(results.read_text().splitlines()[0])
    assert (m["torch"], m["on"]) == ("2.15.0", "two-learners")
    assert m["verdict"] == ("293 passed in 310.44s (0:05:10); "
                            "second learner: 1 passed, 1 failed (07_sharding.ipynb)"), m["verdict"]
    record(parse("torch=2.8.0,other-cpu,busy"), Outcome([], False, "1 failed, 292 passed in 300.00s"), results)
    record(parse("torch=2.8.0,other-cpu,busy"), Outcome([], True, "293 passed in 300.00s"), results)
    lines = results.read_text().splitlines()
    assert len(lines) == 2 and lines[1].startswith("torch 2.8.0 on other-cpu: 293 passed in 300.00s | "), lines


def test_the_runner_reads_nbvals_verdict_line():
    from booktools.run import SUMMARY

    assert SUMMARY.search("=================== 293 passed in 310.44s (0:05:10) ===================")
    assert SUMMARY.search("\x1b[31m1 failed, 292 passed in 300.00s\x1b[0m")
    assert not SUMMARY.search("second learner: 7 passed, 1 failed (07_sharding.ipynb)")


def test_the_book_build_leaves_out_the_installed_releases_and_wheels():
    # Without it, make test-book after make test-torch read the READMEs of torch's NVIDIA
    # libraries in .torch/ as pages, and -W failed on their headings.
    import yaml

    excluded = yaml.safe_load((ROOT / "_config.yml").read_text())["exclude_patterns"]
    assert ".torch" in excluded and ".whl" in excluded, excluded


def test_the_release_table_spans_the_supported_range_one_newest_patch_per_minor_release():
    from booktools.releases import NEWEST_PATCH, ends
    from dplab.compat import check_supported, supported_range

    low, new = supported_range()
    minors = [f"2.{m}" for m in range(int(low.split(".")[1]), int(new.split(".")[1]) + 1)]
    assert list(NEWEST_PATCH) == minors
    assert all(v.rsplit(".", 1)[0] == m and not check_supported(v) for m, v in NEWEST_PATCH.items())
    assert ends() == (NEWEST_PATCH[low], NEWEST_PATCH[new])


def test_a_pick_by_the_tree_is_fixed_by_the_tree_and_rotates_over_commits(tmp_path):
    """booktools.labs.by_tree (the lab whose solution cells make test-student checks one by one):
    the same tree picks the same item, and over commits every item gets its turn."""
    import subprocess

    from booktools import labs

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    picks = set()
    for i in range(40):
        (repo / "f").write_text(str(i))
        subprocess.run(git + ["add", "f"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", str(i)], check=True)
        here = labs.by_tree(list(range(10)), root=repo)
        assert here == labs.by_tree(list(range(10)), root=repo)  # the same tree, the same pick
        picks.add(here)
    assert len(picks) > 5  # rotates


def test_the_missing_releases_of_a_run_install_two_at_a_time_and_a_failure_is_left_to_its_pass(
        monkeypatch, tmp_path):
    """make test ON=torch=NEWEST,other-cpu,two=3@LOWEST installs two releases from a clean
    clone (about 100 s each, mostly one core unpacking): they install at once. An installed
    release is not installed again; a failed one is said and left to its pass's set-up; with
    room on the disk for one only, nothing is installed here."""
    import threading
    import time

    monkeypatch.setattr(releases, "RELEASES", tmp_path)
    (tmp_path / "2.9.1").mkdir()
    (tmp_path / "2.9.1" / ".installed").touch()
    running, most, done = [], [], []
    lock = threading.Lock()

    def install(version, say):
        with lock:
            running.append(version)
            most.append(len(running))
        time.sleep(0.3)
        with lock:
            running.remove(version)
        if version == "2.12.1":
            raise SystemExit("torch=2.12.1: pip could not install torch==2.12.1")
        done.append(version)

    monkeypatch.setattr(releases, "install", install)
    monkeypatch.setattr(releases, "in_venv", lambda version: False)
    monkeypatch.setattr(releases, "free_bytes", lambda: ROOM)
    said = []
    releases.install_at_once(["2.8.0", "2.15.0", "2.9.1", "2.12.1", "2.8.0"], said.append)
    assert sorted(done) == ["2.15.0", "2.8.0"] and max(most) == 2
    assert said[0] == "installing torch=2.8.0, torch=2.15.0, torch=2.12.1, 2 at a time"
    assert "pip could not install torch==2.12.1" in said[-1]
    done.clear()
    monkeypatch.setattr(releases, "free_bytes", lambda: (releases.FREE_GB + 1) * 2**30)
    releases.install_at_once(["2.8.0", "2.15.0"], said.append)
    assert done == []


def test_cis_middle_release_lies_between_the_ends_and_the_tree_picks_it(monkeypatch):
    """.ci/run grades every lab on a third release (make test-nbgrader TORCH=$(--middle)):
    strictly between the ends, the same for the same tree, and over trees every release between
    them, the reference torch included; a release refused by --install is refused before any
    is installed."""
    from booktools import labs

    low, new = releases.ends()
    between = [v for v in releases.NEWEST_PATCH.values() if v not in (low, new)]
    assert releases.middle() == releases.middle() in between
    picks = set()
    for i in range(60):
        monkeypatch.setattr(labs, "by_tree", lambda items, salt="", i=i: items[i % len(items)])
        picks.add(releases.middle())
    assert picks == set(between) and "2.13.0" in picks
    ci = (ROOT / ".ci" / "run").read_text()
    assert "booktools.releases --middle" in ci and re.search(r'make [^\n]*test-nbgrader[^\n]* TORCH="\$middle"', ci)
    assert 'make torch-releases TORCH="$lowest,$newest,$middle"' in ci
    monkeypatch.setattr(releases, "install_at_once", lambda *a, **k: pytest.fail("installed"))
    assert releases.install_each(["2.9.1", "2.7.1"]) == 2
    out = make.run("-n", "test-nbgrader", "TORCH=2.10.0")
    assert "booktools.releases --install 2.10.0" in out.stdout and 'NBGRADER_TORCH="2.10.0"' in out.stdout
    # the reference torch, the venv's own, is never installed beside it (CI's pick may be it)
    monkeypatch.setattr(releases, "install", lambda *a, **k: pytest.fail("installed"))
    monkeypatch.setattr(releases, "in_venv", lambda version: version == "2.13.0")
    assert releases.main(["2.13.0"]) == 0 and releases.install_each(["2.13.0"]) == 0
    out = make.run("-n", "torch-releases", "TORCH=2.8.0,2.15.0,2.10.0")
    assert "booktools.releases --install 2.8.0 2.15.0 2.10.0" in out.stdout, out.stdout + out.stderr
