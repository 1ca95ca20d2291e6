"""The one grader suite that scores every lab (make test-nbgrader): nbgrader's own commands on
a course made from the labs (teach.course), `nbgrader generate_assignment`, `autograde` and
`export`, as an instructor who grades with nbgrader runs them. Per lab: its release is make
student's handout; as handed out it scores 0 at p = 2; with the solutions pasted back it scores
full marks and every cell runs at p = 1 (this is make test-any-p's p = 1, which .ci/run leaves
to this test); each of its plausible mistakes (booktools.labs, Lab.mistakes) loses exactly the
points of the checks that catch it. Nothing is left running, and the course is removed. What
only our own grader does (its report, ranks that fail, the sandbox) is tests/student's.

NBGRADER_LABS=02,03 picks labs (default: all); NBGRADER_TORCH=X.Y.Z a release of torch
installed beside the venv (make test-nbgrader TORCH=X.Y.Z). The solutions run on 1 engine;
the stubs and the mistakes on 2, where a stub that leaves ranks waiting for each other, or a
sum taken for its average, would show."""
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

from booktools.conditions import TorchRelease
from booktools.labs import chosen
from teach import solutions, student
from tests.support.grading import MARK, left_marked, mistakes, points, with_mistake
from tests.support.processes import mpich_segments, segments_left

BIN = Path(sys.executable).parent
LABS = chosen(os.environ.get("NBGRADER_LABS", "all"))
MISTAKES = {name: m for name, m in mistakes().items() if m[0] in LABS}
MISTAKE_ENGINES = "2"  # at p = 1 a sum is its average: the first mistake would not show
LAB_TIMEOUT_S = 900  # one lab's autograde, every submission: the slowest lab takes ~2 min
#: NBGRADER_TORCH=X.Y.Z (make test-nbgrader TORCH=X.Y.Z): that release first on PYTHONPATH, which
#: nbgrader's kernels and their engines inherit, as the runner's condition torch=X.Y.Z does.
TORCH = os.environ.get("NBGRADER_TORCH") or None
TORCH_ENV = TorchRelease(TORCH).environment() if TORCH else {}
#: In every nbgrader call's environment, so in that of every process it starts: the teardown looks
#: at those alone (tests.support.grading.marked), never at another suite's run beside this one.
RUN_MARK = uuid.uuid4().hex


def nbgrader(course: Path, *args: str, timeout: float = 120, engines: str = "1") -> str:
    """Run `nbgrader ARGS` in the course with `engines` engines, bounded: on time out its whole
    process group is killed. Its printout; AssertionError when it fails or logs an error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    env.update(DPLAB_ENGINES=engines, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", **TORCH_ENV)
    env[MARK] = RUN_MARK
    proc = subprocess.Popen([str(BIN / "nbgrader"), *args], cwd=course, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"nbgrader {' '.join(args)} ran past {timeout} s:\n{out[-3000:]}")
    # nbgrader logs a config file it cannot load, and goes on without it: that is a failure here
    errors = [line for line in out.splitlines() if "| ERROR]" in line]
    assert proc.returncode == 0 and not errors, f"nbgrader {' '.join(args)}:\n{out[-3000:]}"
    return out


def submit(course: Path, who: str, lab, nb) -> None:
    folder = course / "submitted" / who / lab.stem
    folder.mkdir(parents=True, exist_ok=True)
    for extra in (course / "release" / lab.stem).iterdir():  # what the learner was given
        if extra.suffix != ".ipynb":
            shutil.copyfile(extra, folder / extra.name)
    nbformat.write(nb, folder / lab.name)


@pytest.fixture(scope="module")
def graded():
    """The course after generate_assignment, autograde and export of every lab: (course, the
    scores by (lab, learner), the checks that lost points by (lab, learner)). The course is
    removed afterwards."""
    imported = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                              env={**os.environ, **TORCH_ENV}, capture_output=True, text=True).stdout.strip()
    print(f"grading on torch {imported}")
    assert TORCH is None or imported.split("+")[0] == TORCH, (TORCH, imported)
    shm = mpich_segments()
    course = Path(tempfile.mkdtemp(prefix="dplab-course-"))
    try:
        subprocess.run([sys.executable, "-m", "teach.course", str(course),
                        *(str(lab.path) for lab in LABS)], check=True, capture_output=True)
        seconds = {}
        for lab in LABS:
            nbgrader(course, "generate_assignment", lab.stem, "--force")
            handout = nbformat.read(course / "release" / lab.stem / lab.name, as_version=4)
            submit(course, "stubs", lab, handout)
            ours = nbformat.read(lab.path, as_version=4)
            submit(course, "solutions", lab, student.paste_back(nbformat.from_dict(handout), ours))
            for i, mistake in enumerate(lab.mistakes):
                nb = student.paste_back(nbformat.from_dict(handout), ours)
                submit(course, f"mistake{i}", lab, with_mistake(nb, mistake))
            t0 = time.monotonic()
            for who, engines in [("stubs", "2"), ("solutions", "1")] + [
                    (f"mistake{i}", MISTAKE_ENGINES) for i in range(len(lab.mistakes))]:
                nbgrader(course, "autograde", lab.stem, "--student", who, "--force",
                         timeout=LAB_TIMEOUT_S, engines=engines)
            seconds[lab.stem] = time.monotonic() - t0
        nbgrader(course, "export", "--to", str(course / "grades.csv"))
        with open(course / "grades.csv", newline="") as f:
            scores = {(row["assignment"], row["student_id"]): (float(row["score"]), float(row["max_score"]))
                      for row in csv.DictReader(f)}
        failed = {}  # the checks that lost points, from nbgrader's gradebook
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            for lab, who in scores:  # export lists every learner for every assignment
                try:
                    nb = gb.find_submission_notebook(lab, lab, who)
                except MissingEntry:
                    continue
                failed[lab, who] = {g.name for g in nb.grades if (g.score or 0) < g.max_score}
        print("autograde, seconds per lab (every submission):",
              ", ".join(f"{k[:2]} {v:.0f}" for k, v in seconds.items()))
        yield course, scores, failed
    finally:
        shutil.rmtree(course, ignore_errors=True)
        left = left_marked(RUN_MARK, within=20)  # the kit's guardian ends a dead kernel's cluster in seconds
        assert not left, f"autograde left processes running: {left}"
        assert not segments_left(shm)
        assert not course.exists()


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_the_release_is_make_students_handout(graded, lab):
    """generate_assignment, with the course's config, hands out what make student does: the
    hint above each stub, unfolded, without the answers' dropdowns, every byte the same."""
    course, _, _ = graded
    released = nbformat.read(course / "release" / lab.stem / lab.name, as_version=4)
    ours = nbformat.read(lab.path, as_version=4)
    assert nbformat.writes(released) == nbformat.writes(student.student_version(ours))
    hints = [line for c in released.cells for line in c.source.split("\n")
             if solutions.HINT.match(line)]
    assert len(hints) == sum(len(solutions.regions(c.source))
                             for c in ours.cells if solutions.is_solution(c))


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_as_handed_out_the_lab_scores_zero(graded, lab):
    _, scores, _ = graded
    assert scores[lab.stem, "stubs"] == (0, points(lab.name))


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_the_solutions_score_full_marks_and_every_cell_runs(graded, lab):
    course, scores, _ = graded
    assert scores[lab.stem, "solutions"] == (points(lab.name), points(lab.name))
    ours = nbformat.read(lab.path, as_version=4)
    ran = nbformat.read(course / "autograded" / "solutions" / lab.stem / lab.name, as_version=4)
    errors = [f"cell {i}: {o.ename}: {o.evalue[:300]}" for i, (c, mine) in enumerate(zip(ran.cells, ours.cells))
              if "raises-exception" not in mine.metadata.get("tags", [])
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_plausible_mistake_loses_exactly_its_checks_points(graded, mistake):
    _, scores, failed = graded
    lab, made = MISTAKES[mistake]
    who = f"mistake{lab.mistakes.index(made)}"
    assert failed[lab.stem, who] == set(made.fails)
    assert scores[lab.stem, who] == (points(lab.name) - points(lab.name, made.fails), points(lab.name))
