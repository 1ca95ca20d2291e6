"""What only our own grader (make grade, `python -m teach.grade`) does, end to end (make
test-student), on Lab 2 at 2 engines: its report of the handout (every check fails, naming the
hint of the stub left to write) and of a plausible mistake (the check that catches it fails,
the rest passes); a rank that raises, dies or hangs, and a dead kernel, fail checks without
stopping the grader; a grader killed with SIGKILL leaves nothing; bad input is refused before
anything starts. That every lab's stubs score 0, its solutions full marks and each mistake
exactly its checks' points is make test-nbgrader's (tests/nbgrader), through nbgrader's own
commands."""
import contextlib
import subprocess
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from booktools.labs import lab as lab_named
from teach import solutions
from tests.support.grading import (grade, grader, make_student, mistakes, pasted_back, with_change,
                                   with_mistake)
from tests.support.processes import lab_processes as cluster_processes

LAB = lab_named("02")  # the lab of the README's example
FIRST_MISTAKE = next(iter(mistakes()))  # the grader's report of one; nbgrader scores them all
BROADCAST = "comm.Bcast(buf, root=0)"


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    """make student's folder for Lab 2 and the lab of the first mistake."""
    other = mistakes()[FIRST_MISTAKE][0]
    return make_student(tmp_path_factory.mktemp("student"), [LAB] + ([other] if other != LAB else []))


def changed(handout: Path, folder: Path, grade_id: str, old: str, new: str) -> Path:
    """Lab 2 solved, with `old` replaced by `new` in the cell named grade_id, written beside the
    handout's labs/ (in a folder named as the test's `folder`)."""
    notebook = pasted_back(handout, LAB.name, folder.name)
    nbformat.write(with_change(nbformat.read(notebook, as_version=4), grade_id, old, new), notebook)
    return notebook


@pytest.mark.parametrize("lab", [LAB], ids=lambda lab: lab.stem)
def test_as_handed_out_every_check_fails_saying_what_to_write(handout, lab):
    status, report, printed = grade(handout / lab.name)
    assert status == 1, printed
    assert report["checks"] and not any(c["passed"] for c in report["checks"]), printed
    assert report["score"] == 0 and not report["stopped"], printed
    first = report["errors"][0] if report["errors"] else report["checks"][0]["message"]
    assert "NotImplementedError" in first and "# HINT:" in first, printed
    hints = {r.hint for c in nbformat.read(lab.path, as_version=4).cells if solutions.is_solution(c)
             for r in solutions.regions(c.source)}
    assert any(h in first for h in hints), printed


@pytest.mark.parametrize("mistake", [FIRST_MISTAKE])
def test_a_plausible_mistake_fails_the_check_that_catches_it(handout, tmp_path, mistake):
    which, made = mistakes()[mistake]
    notebook = pasted_back(handout, which.name, tmp_path.name)
    nbformat.write(with_mistake(nbformat.read(notebook, as_version=4), made), notebook)
    status, report, printed = grade(notebook)
    failed = {c["grade_id"]: c["message"] for c in report["checks"] if not c["passed"]}
    assert status == 1 and set(failed) == set(made.fails), printed  # the rest of the lab still passes
    assert all(failed[check].startswith("AssertionError") for check in made.fails), printed


@pytest.mark.parametrize("injected, error, stopped", [
    ("if rank == 1:\n    raise ValueError('a typo')\n", "StuckRanksError", ""),
    ("if rank == 1:\n    os._exit(3)\n", "RankDiedError", ""),
    ("if rank == 1:\n    time.sleep(600)\n", "", "(lab2-broadcast) ran past 10 s"),
], ids=["a rank raises", "a rank dies", "a rank hangs"])
def test_a_rank_that_fails_or_hangs_fails_the_checks_not_the_grader(handout, tmp_path, injected,
                                                                    error, stopped):
    notebook = changed(handout, tmp_path, "lab2-broadcast", BROADCAST,
                       "import os, time\n" + injected + BROADCAST)
    status, report, printed = grade(notebook, "--cell-timeout", "10")
    assert status == 1 and not report["checks"][0]["passed"], printed
    if error:
        assert report["errors"][0].split(": ", 2)[1].startswith(error), printed
        assert not report["stopped"], printed
    else:
        assert stopped in report["stopped"], printed
        assert all(c["message"].startswith("not run") for c in report["checks"]), printed


def test_a_grader_killed_with_sigkill_leaves_nothing(handout, tmp_path):
    """Its kernel notices that its parent is gone and exits; the kit's guardian ends the cluster."""
    notebook = changed(handout, tmp_path, "lab2-broadcast", BROADCAST,
                       "import time\nif rank == 1:\n    time.sleep(600)\n" + BROADCAST)
    before = cluster_processes()
    running = subprocess.Popen(**grader(notebook), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def started() -> dict[int, str]:
        return {pid: cmd for pid, cmd in cluster_processes().items() if pid not in before}

    deadline = time.monotonic() + 120
    while not any("engine" in cmd for cmd in started().values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert any("engine" in cmd for cmd in started().values()), "no engine started"
    time.sleep(5)  # into the cell where rank 1 sleeps
    running.kill()
    running.wait()
    deadline = time.monotonic() + 30
    while started() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = started()
    for pid in left:  # so that a failure here leaves nothing either
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    assert not left, left


def test_a_dead_kernel_fails_the_checks_left(handout, tmp_path):
    notebook = changed(handout, tmp_path, "lab2-accumulation", "opt.zero_grad()", "import os; os._exit(1)")
    status, report, printed = grade(notebook)
    assert status == 1 and "the kernel died in code cell" in report["stopped"], printed
    assert all(c["message"].startswith("not run: the kernel died") for c in report["checks"]), printed


@pytest.mark.parametrize("make_bad, said", [
    (lambda d: d / "missing.ipynb", "no such notebook"),
    (lambda d: d / "99_not_a_lab.ipynb", "is not the name of a lab"),
    (lambda d: d / "02_data_parallel_by_hand.ipynb", "lacks the check cells"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, make_bad, said):
    bad = make_bad(tmp_path)
    if bad.name != "missing.ipynb":
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), bad)
    status, report, printed = grade(bad, timeout=60)
    assert status == 2 and said in printed and report == {}, printed
