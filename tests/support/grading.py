"""Learners' notebooks for the grading tests (tests/student, tests/slurm): the handed-out copy of
a lab, its solutions pasted back, a cell put in, and a probe of what the learner's code can
reach. Made in memory from the labs by tools/student.py's own functions."""
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import psutil

from tests.support.processes import lab_processes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import sandbox  # noqa: E402  (tools/sandbox.py)
import solutions  # noqa: E402  (authoring tooling: tools/, not the kit)
import student  # noqa: E402  (tools/student.py)


def lab(name: str):
    return nbformat.read(ROOT / "labs" / name, as_version=4)


def handed_out(name: str):
    """make student's copy of the lab: every region a stub."""
    return student.student_version(lab(name))


def solved(name: str):
    """The handed-out copy with the lab's solutions pasted back."""
    return student.paste_back(handed_out(name), lab(name))


def index_of(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if solutions.grading(c).get("grade_id") == grade_id)


def with_cell(nb, before: str, source: str):
    """The notebook with a new code cell of `source` just before the cell named `before`."""
    nb.cells.insert(index_of(nb, before), nbformat.v4.new_code_cell(source))
    return nb


def points_before(name: str, grade_id: str) -> float:
    """The points of the lab's checks that come before the cell named grade_id."""
    nb = lab(name)
    stop = index_of(nb, grade_id)
    return sum(solutions.grading(c)["points"] for c in nb.cells[:stop] if solutions.is_check(c))


def points(name: str, checks=None) -> float:
    """The points of the lab's checks (of those named, if given)."""
    return sum(solutions.grading(c)["points"] for c in lab(name).cells if solutions.is_check(c)
               and (checks is None or solutions.grading(c)["grade_id"] in checks))


def probe(reach: dict[str, tuple[str, str]]) -> str:
    """A cell that tries each {what: (mode, path)} of `reach` (mode "r" reads a file or lists a
    folder, "w" writes a file) and fails, naming them, if any attempt succeeded (a folder seen
    empty hides what it holds)."""
    tries = ",\n".join(f"    ({what!r}, {mode!r}, {path!r})" for what, (mode, path) in reach.items())
    return f"""import os

reached = []
for what, mode, path in [
{tries},
]:
    try:
        if mode == "w":
            with open(path, "w") as f:
                f.write("written by a learner's notebook")
        elif os.path.isdir(path):
            if not os.listdir(path):
                continue  # an empty folder in its place: what it holds is hidden
        else:
            open(path).read()
        reached.append(what)
    except OSError:
        pass
assert not reached, "the learner's code reached " + ", ".join(reached)
print("nothing reached")"""


def learner_processes() -> list[int]:
    """Every live process of the sandbox's account (tools/sandbox.py)."""
    return [p.pid for p in psutil.process_iter(["username"])
            if p.info["username"] == sandbox.ACCOUNT]


def chosen(labs: list[Path], variable: str, offset: int = 0) -> list[Path]:
    """The labs a slow grading test runs: the environment's `variable` (all, or numbers such as
    02,06), else one lab by the day of the year (moved on by `offset`, so that two tests that
    rotate grade different labs on the same day). The test says which it picked."""
    want = os.environ.get(variable, "").strip()
    if want == "all":
        picked = labs
    elif want:
        picked = [lab for lab in labs if lab.name[:2] in want.replace(" ", "").split(",")]
        assert picked, f"{variable}={want}: no such lab"
    else:
        picked = [labs[(datetime.date.today().timetuple().tm_yday + offset) % len(labs)]]
    print(f"{variable}: grading {', '.join(lab.stem for lab in picked)} "
          f"({variable}=all or ={picked[0].name[:2]},... chooses)", file=sys.__stderr__)
    return picked


ENGINES = "2"  # several ranks, so that collectives can hang; the fastest such p on 2 cores


def grader(notebook: Path, *args: str, engines: str = ENGINES) -> dict:
    """subprocess keywords that run tools/grade.py on the notebook with `engines` engines and no
    other DPLAB_* setting of this shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    return dict(args=[sys.executable, str(ROOT / "tools" / "grade.py"), str(notebook), *args],
                env={**env, "DPLAB_ENGINES": engines})


def grade(notebook: Path, *args: str, timeout: float = 600, engines: str = ENGINES) -> tuple[int, dict, str]:
    """Run the grader; its exit status, JSON report and printout. Asserts that it left nothing."""
    before = lab_processes()
    report = notebook.with_suffix(".json")
    out = subprocess.run(**grader(notebook, "--json", str(report), *args, engines=engines),
                         capture_output=True, text=True, timeout=timeout)
    left = {pid: cmd for pid, cmd in lab_processes().items() if pid not in before}
    assert not left, f"the grader left {left}\n{out.stdout}"
    data = json.loads(report.read_text()) if report.exists() else {}
    assert not data.get("left_running"), out.stdout
    return out.returncode, data, out.stdout + out.stderr


# A learner's plausible mistake: (lab, solution cell, old, new, the checks that must fail, and
# only those: tests/nbgrader asserts the points they lose).
MISTAKES = {
    "gradients summed, not averaged": ("02_data_parallel_by_hand", "lab2-dp-step",
                                       "grad_buf[:] *= len(y) / global_batch", "pass",
                                       ("lab2-check-one-process", "lab2-check-ex3-long-run")),
    # the reduce-scatter one chunk off: rank r ends owning chunk r, not r + 1
    "ring off by one chunk": ("03_allreduce_algorithms", "lab3-ring",
                              "chunks[(r - s) % p], chunks[(r - s - 1) % p]",
                              "chunks[(r - s - 1) % p], chunks[(r - s - 2) % p]",
                              ("lab3-check-ring",)),  # the hierarchical check runs the book's ring
    # every micro-batch all-reduced: the same weights (averaging is linear), K times the calls
    "no_sync left out": ("04_ddp", "lab4-no-sync", "with acc.no_sync():", "if True:",
                         ("lab4-check-no-sync",)),
}
