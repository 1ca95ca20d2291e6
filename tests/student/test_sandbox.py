"""Learners' code runs as nobody in particular (teach.sandbox, `python -m teach.grade --sandbox`): a
notebook that tries to read the gradebook, another learner's submission, labs/ and the
repository's history, and to write outside its folder, fails every attempt, and is still graded
in full. Without the sandbox every attempt succeeds, which the second case shows. Needs root."""
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from booktools.pages import ROOT
from teach import grade
from tests.support import grading as submissions

LAB = "00_meet_your_workers.ipynb"  # the fastest lab with checks on every rank
SPOOL = Path("/var/tmp/dplab-grade")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (teach.sandbox)")


@pytest.fixture
def course():
    """A class folder as an instructor keeps one, readable by every account on the machine (only
    the sandbox hides it), outside /tmp: the gradebook and two learners' submissions."""
    base = Path(f"/var/tmp/dplab-class-{uuid.uuid4().hex[:8]}")
    (base / "submitted" / "ada").mkdir(parents=True)
    (base / "submitted" / "bob").mkdir()
    (base / "gradebook.csv").write_text("student_id,score\nada,8\n")
    nbformat.write(submissions.solved(LAB), base / "submitted" / "ada" / LAB)
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "not sandboxed"])
def test_a_notebook_that_reaches_for_the_instructors_files_gets_none_and_is_graded(course, sandboxed):
    outside = course / "written-by-a-learner.txt"
    reach = {"the gradebook": ("r", str(course / "gradebook.csv")),
             "another learner's submission": ("r", str(course / "submitted" / "ada" / LAB)),
             "labs/": ("r", str(ROOT / "labs" / LAB)),
             "the repository's history": ("r", str(ROOT / ".git")),
             "the kit's folder, to write": ("w", str(ROOT / "dplab" / "written-by-a-learner.txt")),
             "the class folder, to write": ("w", str(outside))}
    nb = submissions.with_cell(submissions.solved(LAB), "lab0-check-ring", submissions.probe(reach))
    mine = course / "submitted" / "bob" / LAB
    nbformat.write(nb, mine)
    report = course / "bob.json"
    args = ["--sandbox", "--hide", str(course)] if sandboxed else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    done = subprocess.run([sys.executable, "-m", "teach.grade", str(mine), "--json",
                           str(report), *args], env={**env, "DPLAB_ENGINES": "2"},
                          capture_output=True, text=True, timeout=600)
    got = json.loads(report.read_text())
    written = [Path(p) for mode, p in reach.values() if mode == "w" and Path(p).exists()]
    for path in written:
        path.unlink()  # so that a failure here leaves nothing either
    assert got["score"] == got["max_score"] == submissions.points(LAB), done.stdout
    if sandboxed:
        assert got["errors"] == [] and written == [], done.stdout
        assert not submissions.learner_processes() and not any(SPOOL.glob("run-*"))
    else:  # the same notebook, run as the grader: every attempt succeeds
        assert len(got["errors"]) == 1 and all(what in got["errors"][0] for what in reach), done.stdout
        assert len(written) == 2


def test_without_root_the_sandbox_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    """As any other account (os.geteuid patched: a real one could not read a clone in a 700
    folder), teach.grade --sandbox says what to do, and starts nothing."""
    nb = tmp_path / LAB
    nbformat.write(submissions.handed_out(LAB), nb)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["grade.py", str(nb), "--sandbox"])
    with pytest.raises(SystemExit) as stopped:
        grade.main()
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and "needs root" in said and "without it" in said, said


def test_the_sandbox_account_is_not_the_slurm_hub_tests_learner():
    """The sandbox keeps the account it makes; the SLURM hub tests make their learner's account
    and remove it, and refuse one they did not make. Under one name (both were dplab-learner),
    make test-hub-slurm after a sandboxed grading got the sandbox's account, home /nonexistent,
    and every server's job failed to start."""
    from tests.support.slurm_hub import USER

    assert submissions.sandbox.ACCOUNT != USER


def test_runs_that_start_at_once_on_a_new_machine_all_get_the_account():
    """A class's SLURM jobs start together, and on a new machine each finds no sandbox account and
    makes it: every one of them must get it (useradd fails for all but one)."""
    from teach import sandbox

    name = f"{sandbox.ACCOUNT}-0"
    subprocess.run(["userdel", name], capture_output=True)  # as on a new machine
    code = f"from teach import sandbox; print(sandbox.account({name!r}).pw_name)"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    said = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err[-300:] for _, err in said]
    assert [out.strip() for out, _ in said] == [name] * 6


def test_runs_graded_at_once_each_lease_an_account_of_their_own():
    """Two runs on one machine never share an account; one ended frees its account."""
    from teach import sandbox

    with sandbox.lease() as a, sandbox.lease() as b:
        assert a != b and a.startswith(sandbox.ACCOUNT) and b.startswith(sandbox.ACCOUNT)
        with sandbox.lease() as c:
            assert c not in (a, b)
    with sandbox.lease() as again:
        assert again == a


@pytest.fixture
def folder():
    """A class folder outside /tmp, readable by every account (only the sandbox hides it)."""
    base = Path(f"/var/tmp/dplab-class-{uuid.uuid4().hex[:8]}")
    base.mkdir()
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base)


def sandboxed_with(folder: Path, cell: str, *args: str, name: str = "report") -> tuple[dict, str, int]:
    """Lab 0, solved, with `cell` before its ring check, graded with --sandbox (and `args`) at
    p = 2: the JSON report, what the grader printed, and its exit status."""
    mine = folder / LAB
    nbformat.write(submissions.with_cell(submissions.solved(LAB), "lab0-check-ring", cell), mine)
    report = folder / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    done = subprocess.run([sys.executable, "-m", "teach.grade", str(mine), "--sandbox", *args,
                           "--json", str(report)], env={**env, "DPLAB_ENGINES": "2"},
                          capture_output=True, text=True, timeout=600)
    return json.loads(report.read_text()), done.stdout + done.stderr, done.returncode


def test_a_run_past_its_memory_bound_is_stopped_and_says_so(folder):
    """A learner's cell that allocates past the run's memory bound (teach.grade --memory) is
    killed, the checks it reaches fail, and the report says why; the run's cgroup is gone after
    it. The same notebook graded with a larger bound passes: the bound, not the lab, stopped it."""
    from teach import sandbox

    hog = "big = bytearray(1536 * 2**20)  # 1.5 GiB, every page written\nprint(len(big))"
    bounded, said, _ = sandboxed_with(folder, hog, "--memory", "1", name="1")
    assert bounded["score"] < bounded["max_score"], said
    assert "reached its memory bound (1 GiB)" in bounded["stopped"], said
    roomy, said, _ = sandboxed_with(folder, hog, "--memory", "4", name="4")
    assert roomy["score"] == roomy["max_score"] and not roomy["stopped"], said
    assert not any(sandbox.memory_group(f"{sandbox.ACCOUNT}-{i}").exists() for i in range(sandbox.POOL))
    assert not submissions.learner_processes() and not any(SPOOL.glob("run-*"))


def test_a_notebook_that_forks_away_scores_zero_and_leaves_nothing(folder):
    """A cell that starts a process its kernel does not wait for (setsid -f: the child is
    orphaned at once, and the sandbox's first process inherits it) scores 0, and the report
    names the process; the process ends with the run. A solved notebook that leaves nothing
    scores full marks (the first test here)."""
    away = "import subprocess\nsubprocess.run(['setsid', '-f', 'sleep', '600'], check=True)"
    got, said, status = sandboxed_with(folder, away)
    assert status == 1 and got["score"] == 0 < got["max_score"], said
    assert "forked away" in got["stopped"] and "sleep" in got["stopped"], said
    assert all("forked away" in c["message"] for c in got["checks"]), said
    assert not submissions.learner_processes() and not any(SPOOL.glob("run-*"))


def test_a_notebook_that_fills_its_tmpfs_gets_no_space_in_its_own_cell_and_the_node_none(folder):
    """A cell that writes until /tmp is full stops there with 'No space left on device' (the
    run's own tmpfs, 1 GiB), the first error the report shows; the run's cluster cannot work
    without room in /tmp, so the later checks fail; the node's /tmp never sees it."""
    fill = ("with open('/tmp/fill', 'wb') as f:\n"
            "    for _ in range(4096):\n"
            "        f.write(bytes(2**20))  # 4 GiB wanted, 1 MiB at a time\n"
            "        f.flush()")
    free = shutil.disk_usage("/tmp").free
    got, said, _ = sandboxed_with(folder, fill)
    assert "No space left on device" in got["errors"][0], said
    assert 0 < got["score"] < got["max_score"], said  # the checks before it passed
    assert abs(shutil.disk_usage("/tmp").free - free) < 2**30, "the node's /tmp was written"
    assert not submissions.learner_processes() and not any(SPOOL.glob("run-*"))
