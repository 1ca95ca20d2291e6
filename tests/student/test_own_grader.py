"""What only our own grader (make grade, `python -m teach.grade`) does, end to end (make
test-student), at 2 engines: its report of Lab 2 as handed out (every check fails, naming the
hint of the stub left to write; the README's example) and of a plausible mistake (the check that
catches it fails, the rest passes), each on a real lab. A rank that raises, dies or hangs, and a
dead kernel, fail checks without stopping the grader, and a grader killed with SIGKILL leaves
nothing: these need no real lab, and run on a lab in miniature (tests.support.grading.tiny_lab,
graded through the grader's --source), which grades in seconds. Bad input is refused before
anything starts. That every lab's stubs score 0, its solutions full marks and each mistake
exactly its checks' points is make test-nbgrader's (tests/nbgrader), through nbgrader's own
commands."""
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from booktools.labs import lab as lab_named
from teach import solutions
from tests.support.grading import (TINY_BROADCAST, TINY_TOTAL, grade, grader, left_marked, marked,
                                   pasted_back, tiny_lab, with_change, with_mistake)

LAB = lab_named("02")  # the lab of the README's example
# The grader's report of a plausible mistake, in the cheapest lab to grade that has one (nbgrader
# scores them all): Lab 3's cells after the cluster's start took 16-29 s where Lab 2's with its
# mistake took 28-39 s, side by side; one grading of Lab 4 takes twice as long.
MISTAKE_LAB = lab_named("03")
SLOW_CELL_S = "60"  # --cell-timeout where no cell should reach it: only a bound
# --cell-timeout where a rank hangs: above what the cluster's start takes on a busy 2-core box
HANG_CELL_S = 30


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The lab in miniature, in a folder of its own that the grader reads as its labs."""
    return tiny_lab(tmp_path_factory.mktemp("source"))


def changed(tiny: Path, folder: Path, grade_id: str, old: str, new: str) -> Path:
    """The lab in miniature, solved, with `old` replaced by `new` in the cell named grade_id,
    written as a learner's notebook into `folder`."""
    notebook = folder / tiny.name
    nbformat.write(with_change(nbformat.read(tiny, as_version=4), grade_id, old, new), notebook)
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


@pytest.mark.parametrize("mistake", MISTAKE_LAB.mistakes[:1], ids=lambda m: m.name)
def test_a_plausible_mistake_fails_the_check_that_catches_it(handout, tmp_path, mistake):
    notebook = pasted_back(handout, MISTAKE_LAB.name, tmp_path.name)
    nbformat.write(with_mistake(nbformat.read(notebook, as_version=4), mistake), notebook)
    status, report, printed = grade(notebook)
    failed = {c["grade_id"]: c["message"] for c in report["checks"] if not c["passed"]}
    assert status == 1 and set(failed) == set(mistake.fails), printed  # the rest of the lab still passes
    assert all(failed[check].startswith("AssertionError") for check in mistake.fails), printed


@pytest.mark.parametrize("injected, error, stopped", [
    ("if rank == 1:\n    raise ValueError('a typo')\n", "StuckRanksError", ""),
    ("if rank == 1:\n    os._exit(3)\n", "RankDiedError", ""),
    ("if rank == 1:\n    time.sleep(600)\n", "", f"(tiny-broadcast) ran past {HANG_CELL_S} s"),
], ids=["a rank raises", "a rank dies", "a rank hangs"])
def test_a_rank_that_fails_or_hangs_fails_the_checks_not_the_grader(tiny, tmp_path, injected,
                                                                    error, stopped):
    notebook = changed(tiny, tmp_path, "tiny-broadcast", TINY_BROADCAST,
                       "import os, time\n" + injected + TINY_BROADCAST)
    status, report, printed = grade(notebook, "--cell-timeout", str(HANG_CELL_S) if stopped else SLOW_CELL_S,
                                    source=tiny.parent)
    assert status == 1 and not report["checks"][0]["passed"], printed
    if error:
        assert report["errors"][0].split(": ", 2)[1].startswith(error), printed
        assert not report["stopped"], printed
    else:
        assert stopped in report["stopped"], printed
        assert all(c["message"].startswith("not run") for c in report["checks"]), printed


def test_a_grader_killed_with_sigkill_leaves_nothing(tiny, tmp_path):
    """Its kernel notices that its parent is gone and exits; the kit's guardian ends the cluster.
    What it started carries a mark of this test's (tests.support.grading.marked): only that is
    waited for, and killed if it is left, never another test's processes."""
    asleep = tmp_path / "rank 1 sleeps"
    notebook = changed(tiny, tmp_path, "tiny-broadcast", TINY_BROADCAST,
                       f"import time\nif rank == 1:\n    open({str(asleep)!r}, 'w').close()\n"
                       f"    time.sleep(600)\n{TINY_BROADCAST}")
    mark = uuid.uuid4().hex
    running = subprocess.Popen(**grader(notebook, "--source", str(tiny.parent), mark=mark),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not asleep.exists() and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert asleep.exists(), "rank 1 never reached the cell where it sleeps"
    seen = " ".join(marked(mark).values())
    assert "engine" in seen and "dplab.cluster.guard" in seen, f"the cluster lacks the mark: {seen}"
    running.kill()
    running.wait()
    left = left_marked(mark, within=30)
    assert not left, left


def test_a_dead_kernel_fails_the_checks_left(tiny, tmp_path):
    notebook = changed(tiny, tmp_path, "tiny-total", TINY_TOTAL, "import os; os._exit(1)")
    status, report, printed = grade(notebook, source=tiny.parent)
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
