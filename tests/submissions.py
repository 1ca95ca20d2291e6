"""Learners' notebooks for the grading tests (tests/student, tests/slurm): the handed-out copy of
a lab, its solutions pasted back, a cell put in, and a probe of what the learner's code can
reach. Made in memory from the labs by tools/student.py's own functions."""
import datetime
import os
import sys
from pathlib import Path

import nbformat
import psutil

ROOT = Path(__file__).resolve().parent.parent
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
