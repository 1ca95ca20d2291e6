"""An nbgrader course directory made from the labs, for instructors who grade with nbgrader's own
commands (README, "Teaching with the book"):

    python -m teach.course COURSE [labs/02_data_parallel_by_hand.ipynb ...]
    cd COURSE && nbgrader generate_assignment 02_data_parallel_by_hand
    nbgrader collect / autograde 02_data_parallel_by_hand && nbgrader export

Each lab is an assignment named after it, source/NAME/NAME.ipynb, with the files beside it that
the lab reads (booktools.labs, Lab.reads: Lab 5's training script). COURSE/nbgrader_config.py
adds teach.handout's preprocessor (an installed module) to generate_assignment, after
ClearSolutions, so that its release/ is what `make student` hands out (tests/nbgrader), and
bounds each cell that autograde runs by booktools.notebooks' CELL_TIMEOUT_S.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import nbformat

from booktools.labs import Lab, facts, labs
from booktools.notebooks import CELL_TIMEOUT_S
from booktools.pages import ROOT
from teach import solutions

CONFIG = '''\
# Made by teach.course: nbgrader's generate_assignment with the book's handout step.
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

from teach.handout import Handout

c = get_config()  # noqa: F821 (nbgrader's config loader defines it)
c.CourseDirectory.root = {root!r}
steps = list(GenerateAssignment.class_traits()["preprocessors"].default())
steps.insert(steps.index(ClearSolutions) + 1, Handout)
c.GenerateAssignment.preprocessors = steps
c.Execute.timeout = {timeout}  # seconds per cell: a rank that waits for ever fails its cell
'''


def make_course(course: Path, chosen: list[Lab]) -> list[str]:
    """Write the course; the assignments' names."""
    for lab in chosen:
        problems = solutions.check_notebook(nbformat.read(lab.path, as_version=4), lab.name)
        if problems:
            raise SystemExit("course: fix the labs' solution regions first:\n  " + "\n  ".join(problems))
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course.resolve()),
                                                             timeout=CELL_TIMEOUT_S))
    for lab in chosen:
        folder = course / "source" / lab.stem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lab.path, folder / lab.name)
        for read in lab.reads:
            shutil.copyfile(ROOT / read, folder / Path(read).name)
    return [lab.stem for lab in chosen]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("course", type=Path, help="the course directory to write")
    ap.add_argument("labs", nargs="*", type=Path, help="labs (default: every lab of _toc.yml)")
    args = ap.parse_args()
    for path in args.labs:
        if not path.is_file() or path.resolve().parent != ROOT / "labs":
            ap.error(f"not a lab in labs/: {path}")
    chosen = [facts(path.resolve()) for path in args.labs] or labs()
    for name in make_course(args.course, chosen):
        print(f"{args.course}/source/{name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
