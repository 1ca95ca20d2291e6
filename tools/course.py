"""An nbgrader course directory made from the labs, for instructors who grade with nbgrader's own
commands (README, "Teaching with the book"):

    python tools/course.py COURSE [labs/02_data_parallel_by_hand.ipynb ...]
    cd COURSE && nbgrader generate_assignment 02_data_parallel_by_hand
    nbgrader collect / autograde 02_data_parallel_by_hand && nbgrader export

Each lab is an assignment named after it, source/NAME/NAME.ipynb, with the files beside it that
the lab reads (Lab 5's training script). COURSE/nbgrader_config.py adds tools/handout.py to
generate_assignment, after ClearSolutions, so that its release/ is what `make student` hands
out (tests/nbgrader), and bounds each cell that autograde runs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import nbformat

import solutions  # authoring tooling, beside this script (tools/ is sys.path[0])

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 300  # as tools/grade.py: a cell past it is a rank that waits for ever
# Files a lab reads outside its own folder, by lab: copied beside the notebook in the course.
EXTRA = {"05_when_workers_fail": ["chapters/ddp_train.py"]}

CONFIG = '''\
# Made by tools/course.py: nbgrader's generate_assignment with the book's handout step.
import sys

sys.path.insert(0, {tools!r})

from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

from handout import Handout

c = get_config()  # noqa: F821 (nbgrader's config loader defines it)
c.CourseDirectory.root = {root!r}
steps = list(GenerateAssignment.class_traits()["preprocessors"].default())
steps.insert(steps.index(ClearSolutions) + 1, Handout)
c.GenerateAssignment.preprocessors = steps
c.Execute.timeout = {timeout}  # seconds per cell: a rank that waits for ever fails its cell
'''


def make_course(course: Path, labs: list[Path]) -> list[str]:
    """Write the course; the assignments' names."""
    names = []
    for lab in labs:
        problems = solutions.check_notebook(nbformat.read(lab, as_version=4), lab.name)
        if problems:
            raise SystemExit("course: fix the labs' solution regions first:\n  " + "\n  ".join(problems))
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(
        tools=str(TOOLS), root=str(course.resolve()), timeout=CELL_TIMEOUT_S))
    for lab in labs:
        folder = course / "source" / lab.stem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lab, folder / lab.name)
        for extra in EXTRA.get(lab.stem, []):
            shutil.copyfile(ROOT / extra, folder / Path(extra).name)
        names.append(lab.stem)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("course", type=Path, help="the course directory to write")
    ap.add_argument("labs", nargs="*", type=Path, help="labs (default: labs/*.ipynb)")
    args = ap.parse_args()
    labs = args.labs or sorted((ROOT / "labs").glob("*.ipynb"))
    for lab in labs:
        if not lab.is_file() or lab.resolve().parent != ROOT / "labs":
            ap.error(f"not a lab in labs/: {lab}")
    for name in make_course(args.course, labs):
        print(f"{args.course}/source/{name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
