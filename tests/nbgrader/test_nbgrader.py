"""nbgrader's own commands on a course made from the labs (make test-nbgrader): tools/course.py,
then `nbgrader generate_assignment`, `autograde` and `export`, as an instructor who grades with
nbgrader runs them. Per lab: its release is make student's handout; as handed out it scores 0 at p = 2;
with the solutions pasted back it scores full marks and every cell runs at p = 1 (this is
make test-any-p's p = 1, which .ci/run leaves to this test); each plausible mistake of
tests/student loses exactly the points of the check that catches it. Nothing is left running,
and the course is removed.

NBGRADER_LABS=02,03 picks labs (default: all). The solutions run on 1 engine; the stubs and the
mistakes on 2, where a stub that leaves ranks waiting for each other, or a sum taken for its
average, would show."""
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbgrader.api import Gradebook, MissingEntry

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import solutions  # noqa: E402  (authoring tooling: tools/, not the kit)
import student  # noqa: E402  (tools/student.py: make student)

from tests.support.grading import MISTAKES, points  # noqa: E402
from tests.support.processes import lab_processes as cluster_processes  # noqa: E402

BIN = Path(sys.executable).parent
ALL = sorted((ROOT / "labs").glob("*.ipynb"))
WANTED = os.environ.get("NBGRADER_LABS", "all")
LABS = ALL if WANTED == "all" else [lab for lab in ALL if lab.name[:2] in WANTED.split(",")]
MISTAKE_ENGINES = "2"  # at p = 1 a sum is its average: the first mistake would not show
LAB_TIMEOUT_S = 900  # one lab's autograde, every submission: the slowest lab takes ~2 min
def nbgrader(course: Path, *args: str, timeout: float = 120, engines: str = "1") -> str:
    """Run `nbgrader ARGS` in the course with `engines` engines, bounded: on time out its whole
    process group is killed. Its printout; AssertionError when it fails or logs an error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    env.update(DPLAB_ENGINES=engines, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
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


def submit(course: Path, who: str, lab: Path, nb) -> None:
    folder = course / "submitted" / who / lab.stem
    folder.mkdir(parents=True, exist_ok=True)
    for extra in (course / "release" / lab.stem).iterdir():  # what the learner was given
        if extra.suffix != ".ipynb":
            shutil.copyfile(extra, folder / extra.name)
    nbformat.write(nb, folder / lab.name)


def mistakes_of(lab: Path) -> dict[str, tuple]:
    return {name: m for name, m in MISTAKES.items() if m[0] == lab.stem}


@pytest.fixture(scope="module")
def graded():
    """The course after generate_assignment, autograde and export of every lab: (course, the
    scores by (lab, learner), each lab's seconds). The course is removed afterwards."""
    before = set(cluster_processes())
    shm = set(os.listdir("/dev/shm"))
    course = Path(tempfile.mkdtemp(prefix="dplab-course-"))
    try:
        subprocess.run([sys.executable, str(ROOT / "tools" / "course.py"), str(course),
                        *map(str, LABS)], check=True, capture_output=True)
        seconds = {}
        for lab in LABS:
            nbgrader(course, "generate_assignment", lab.stem, "--force")
            handout = nbformat.read(course / "release" / lab.stem / lab.name, as_version=4)
            submit(course, "stubs", lab, handout)
            ours = nbformat.read(lab, as_version=4)
            submit(course, "solutions", lab, student.paste_back(nbformat.from_dict(handout), ours))
            for i, (name, (_, cell, old, new, _)) in enumerate(mistakes_of(lab).items()):
                nb = student.paste_back(nbformat.from_dict(handout), ours)
                target = next(c for c in nb.cells if solutions.grading(c).get("grade_id") == cell)
                assert target.source.count(old) == 1, (name, old)
                target.source = target.source.replace(old, new)
                submit(course, f"mistake{i}", lab, nb)
            t0 = time.monotonic()
            for who, engines in [("stubs", "2"), ("solutions", "1")] + [
                    (f"mistake{i}", MISTAKE_ENGINES) for i in range(len(mistakes_of(lab)))]:
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
        _, alive = psutil.wait_procs([psutil.Process(p) for p in set(cluster_processes()) - before
                                      if psutil.pid_exists(p)], timeout=20)
        left = [p.pid for p in alive]
        for p in alive:
            p.kill()
        assert not left, f"autograde left processes running: {left}"
        assert not {f for f in set(os.listdir("/dev/shm")) - shm if f.startswith("mpich")}
        assert not course.exists()


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_the_release_is_make_students_handout(graded, lab):
    """generate_assignment, with the course's config, hands out what make student does: the
    hint above each stub, unfolded, without the answers' dropdowns, every byte the same."""
    course, _, _ = graded
    released = nbformat.read(course / "release" / lab.stem / lab.name, as_version=4)
    ours = student.student_version(nbformat.read(lab, as_version=4))
    assert nbformat.writes(released) == nbformat.writes(ours)
    hints = [line for c in released.cells for line in c.source.split("\n")
             if solutions.HINT.match(line)]
    assert len(hints) == sum(len(solutions.regions(c.source))
                             for c in nbformat.read(lab, as_version=4).cells if solutions.is_solution(c))


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_as_handed_out_the_lab_scores_zero(graded, lab):
    _, scores, _ = graded
    assert scores[lab.stem, "stubs"] == (0, points(lab.name))


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_the_solutions_score_full_marks_and_every_cell_runs(graded, lab):
    course, scores, _ = graded
    assert scores[lab.stem, "solutions"] == (points(lab.name), points(lab.name))
    ours = nbformat.read(lab, as_version=4)
    ran = nbformat.read(course / "autograded" / "solutions" / lab.stem / lab.name, as_version=4)
    errors = [f"cell {i}: {o.ename}: {o.evalue[:300]}" for i, (c, mine) in enumerate(zip(ran.cells, ours.cells))
              if "raises-exception" not in mine.metadata.get("tags", [])
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if MISTAKES[m][0] in {lab.stem for lab in LABS}])
def test_a_plausible_mistake_loses_exactly_its_checks_points(graded, mistake):
    _, scores, failed = graded
    stem, _, _, _, checks = MISTAKES[mistake]
    lab = ROOT / "labs" / f"{stem}.ipynb"
    who = f"mistake{list(mistakes_of(lab)).index(mistake)}"
    lost = points(lab.name, checks)
    assert failed[stem, who] == set(checks)
    assert scores[stem, who] == (points(lab.name) - lost, points(lab.name))
