"""make student and make grade, end to end (make test-student): a lab's student notebook graded
as handed out (every check fails, saying why: make test-nbgrader scores every lab's so), and
with its solutions pasted back at p = 3 (every check passes, and every cell runs): one lab a
day, SOLVED_LABS=all or =02,06 chooses, as make test-nbgrader grades every lab's solutions
(at p = 1) and make test-torch ON=two-learners runs every lab at p = 3; plausible mistakes fail
the check that catches them; a rank that raises, dies or hangs, and a dead kernel, fail checks
without stopping the grader; nothing is left running."""
import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import solutions  # noqa: E402  (authoring tooling: tools/, not the kit)

ROOT = Path(__file__).resolve().parent.parent.parent
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
from tests.support import grading as submissions  # noqa: E402
from tests.support.grading import MISTAKES, grade, grader  # noqa: E402
from tests.support.processes import lab_processes as cluster_processes  # noqa: E402

SOLVED = submissions.chosen(LABS, "SOLVED_LABS", offset=4)  # another lab than test_independent_checks'
ANY_P = "3"  # the solutions pasted back: p does not divide the labs' batches (make test-any-p)


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    """make student's folder: labs/ of student notebooks."""
    out = tmp_path_factory.mktemp("student")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "student.py"), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("stubs to write") == len(LABS), done.stdout
    return out / "labs"


def pasted_back(handout: Path, lab: Path, folder: Path) -> Path:
    """The lab's student notebook with its solutions back, in a folder beside the handout's labs/
    (named after the test's `folder`), where the handout's other files are at the same place."""
    folder = handout.parent / folder.name
    folder.mkdir(exist_ok=True)
    out = folder / lab.name
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "student.py"), "--paste-back",
                           str(handout / lab.name), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def test_nbgrader_changed_no_version_that_requirements_txt_pins():
    from importlib.metadata import version

    assert version("nbgrader") == "0.9.6"
    pins = [line.split("#")[0].strip().split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()]
    for name, pinned in (p for p in pins if len(p) == 2):
        assert version(name).split("+")[0] == pinned, name  # torch's local wheel is 2.13.0+cpu


def test_every_launch_button_of_the_book_opens_a_page_of_the_handout(handout):
    toc = (ROOT / "_toc.yml").read_text()
    pages = re.findall(r"(?:root|file):\s*(\S+)", toc)
    assert len(pages) > len(LABS)
    for page in pages:
        suffix = ".ipynb" if page.startswith("labs/") else ".md"
        assert (handout.parent / f"{page}{suffix}").is_file(), page


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_the_student_notebook_is_the_lab_without_its_solutions(handout, lab, tmp_path):
    ours, theirs = nbformat.read(lab, as_version=4), nbformat.read(handout / lab.name, as_version=4)
    assert len(ours.cells) == len(theirs.cells)
    for mine, given in zip(ours.cells, theirs.cells):
        text = given.source
        assert "SOLUTION" not in text and ":::{solution}" not in text
        if given.cell_type == "code":
            assert given.outputs == [] and given.execution_count is None
        if solutions.is_check(mine):
            assert given.source == mine.source and given.metadata["nbgrader"]["locked"]
        elif solutions.is_solution(mine):
            assert text.count("raise NotImplementedError(") == len(solutions.regions(mine.source))
        elif given.cell_type == "code":
            assert given.source == mine.source
    back = nbformat.read(pasted_back(handout, lab, tmp_path), as_version=4)
    assert [c.source for c in back.cells if c.cell_type == "code"] == \
           [c.source for c in ours.cells if c.cell_type == "code"]


# make test-nbgrader autogrades every lab's stubs at 2 engines (they score 0); here, the grader's
# own report of them, for the lab of the README's example.
@pytest.mark.parametrize("lab", [ROOT / "labs" / "02_data_parallel_by_hand.ipynb"], ids=lambda p: p.stem)
def test_as_handed_out_every_check_fails_saying_what_to_write(handout, lab):
    status, report, printed = grade(handout / lab.name)
    assert status == 1, printed
    assert report["checks"] and not any(c["passed"] for c in report["checks"]), printed
    assert report["score"] == 0 and not report["stopped"], printed
    first = report["errors"][0] if report["errors"] else report["checks"][0]["message"]
    assert "NotImplementedError" in first and "# HINT:" in first, printed
    hints = {r.hint for c in nbformat.read(lab, as_version=4).cells if solutions.is_solution(c)
             for r in solutions.regions(c.source)}
    assert any(h in first for h in hints), printed


@pytest.mark.parametrize("lab", SOLVED, ids=lambda p: p.stem)
def test_with_the_solutions_pasted_back_every_check_passes_and_every_cell_runs(handout, lab, tmp_path):
    status, report, printed = grade(pasted_back(handout, lab, tmp_path), "--all", engines=ANY_P)
    assert status == 0 and report["errors"] == [] and not report["stopped"], printed
    assert report["score"] == report["max_score"] > 0, printed


def with_change(notebook: Path, grade_id: str, old: str, new: str) -> Path:
    """The notebook with `old` replaced by `new` (once) in the cell named grade_id."""
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if solutions.grading(c).get("grade_id") == grade_id)
    assert cell.source.count(old) == 1, (grade_id, old)
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, notebook)
    return notebook


# make test-nbgrader grades every mistake, through nbgrader's gradebook; here, the grader's report
# of the first.
@pytest.mark.parametrize("mistake", list(MISTAKES)[:1])
def test_a_plausible_mistake_fails_the_check_that_catches_it(handout, tmp_path, mistake):
    stem, cell, old, new, checks = MISTAKES[mistake]
    lab = ROOT / "labs" / f"{stem}.ipynb"
    status, report, printed = grade(with_change(pasted_back(handout, lab, tmp_path), cell, old, new))
    failed = {c["grade_id"]: c["message"] for c in report["checks"] if not c["passed"]}
    assert status == 1 and set(failed) == set(checks), printed  # the rest of the lab still passes
    assert all(failed[check].startswith("AssertionError") for check in checks), printed


BROADCAST = "comm.Bcast(buf, root=0)"


@pytest.mark.parametrize("injected, error, stopped", [
    ("if rank == 1:\n    raise ValueError('a typo')\n", "StuckRanksError", ""),
    ("if rank == 1:\n    os._exit(3)\n", "RankDiedError", ""),
    ("if rank == 1:\n    time.sleep(600)\n", "", "(lab2-broadcast) ran past 10 s"),
], ids=["a rank raises", "a rank dies", "a rank hangs"])
def test_a_rank_that_fails_or_hangs_fails_the_checks_not_the_grader(handout, tmp_path, injected,
                                                                    error, stopped):
    lab = ROOT / "labs" / "02_data_parallel_by_hand.ipynb"
    notebook = with_change(pasted_back(handout, lab, tmp_path), "lab2-broadcast", BROADCAST,
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
    lab = ROOT / "labs" / "02_data_parallel_by_hand.ipynb"
    notebook = with_change(pasted_back(handout, lab, tmp_path), "lab2-broadcast", BROADCAST,
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
    lab = ROOT / "labs" / "02_data_parallel_by_hand.ipynb"
    notebook = with_change(pasted_back(handout, lab, tmp_path), "lab2-accumulation", "opt.zero_grad()",
                           "import os; os._exit(1)")
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
