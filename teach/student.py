"""The learners' notebooks, made from the labs with nbgrader's preprocessors (make student).

    python -m teach.student [--out _build/student] [labs/02_data_parallel_by_hand.ipynb ...]
    python -m teach.student --paste-back STUDENT.ipynb --out FILE   # the labs' solutions put back

nbgrader's own ClearSolutions replaces each solution region (teach.solutions) with its stub, below
the region's hint line; teach.handout unfolds those cells (the book folds them, below a "Try it
first." line that becomes "Your turn.") and removes the exercises' solution dropdowns; outputs are
cleared; check cells are kept, locked and checksummed. `nbgrader generate_assignment` with the
course's config (teach.course) makes the same notebooks (tests/nbgrader). The notebooks go to
OUT/labs/, and beside labs/ the book's pages (SUPPORT) and the files each lab reads
(booktools.labs, Lab.reads), at the repository's paths, so that OUT is the folder to hand out.
The kit (dplab, labcode) comes from the learners' environment, as for the labs themselves.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import nbformat

from booktools.labs import facts, labs
from booktools.pages import ROOT
from teach import solutions

# Besides the labs, the handout keeps the book's other pages (their launch buttons open them)
# and their figures, at the repository's paths.
SUPPORT = ["intro.md", "chapters", "img"]


def preprocessors() -> list:
    """nbgrader's generate_assignment steps that need no gradebook, with the handout's own."""
    try:
        from nbgrader.preprocessors import (CheckCellMetadata, ClearOutput, ClearSolutions,
                                            ComputeChecksums, LockCells)
    except ImportError:
        sys.exit("teach.student needs nbgrader: run `make student`, which installs "
                 "requirements-teach.txt, or .venv/bin/pip install -r requirements-teach.txt")
    from teach.handout import Handout

    return [LockCells(), ClearSolutions(), Handout(), ClearOutput(), CheckCellMetadata(),
            ComputeChecksums()]


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The learner's copy of a lab (a new notebook; the lab is not changed)."""
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)  # a copy
    resources = {}
    for step in preprocessors():
        nb, resources = step.preprocess(nb, resources)
    return nb


def paste_back(student: nbformat.NotebookNode, lab: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student notebook with the lab's regions in place of its stubs, matched by grade_id."""
    by_id = {solutions.grading(c).get("grade_id"): c for c in lab.cells if solutions.is_solution(c)}
    for i, cell in enumerate(student.cells):
        if solutions.is_solution(cell):
            gid = solutions.grading(cell)["grade_id"]
            cell.source = solutions.paste_back(cell.source, by_id[gid].source, f"cell {i} ({gid})")
    return student


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", type=Path, help="labs (default: every lab of _toc.yml)")
    ap.add_argument("--out", type=Path, help="folder (default _build/student) or, with --paste-back, file")
    ap.add_argument("--paste-back", type=Path, metavar="STUDENT", help="put the lab's solutions back "
                    "into this student notebook (the lab of the same name in labs/)")
    args = ap.parse_args()
    if args.paste_back:
        lab_path = ROOT / "labs" / args.paste_back.name
        if not args.paste_back.is_file() or not lab_path.is_file():
            ap.error(f"--paste-back takes a student notebook named as a lab in labs/: {args.paste_back}")
        if not args.out:
            ap.error("--paste-back needs --out FILE")
        nb = paste_back(nbformat.read(args.paste_back, as_version=4), nbformat.read(lab_path, as_version=4))
        nbformat.write(nb, args.out)
        return 0
    paths = args.labs or [lab.path for lab in labs()]
    out = (args.out or ROOT / "_build" / "student") / "labs"
    problems = []
    notebooks = {}
    for path in paths:
        if not path.is_file():
            ap.error(f"no such lab: {path}")
        notebooks[path] = nbformat.read(path, as_version=4)
        problems += solutions.check_notebook(notebooks[path], path.name)
    if problems:
        print("make student: fix the labs' solution regions first:\n  " + "\n  ".join(problems),
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for name in dict.fromkeys(SUPPORT + [r for path in notebooks for r in facts(path).reads]):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, out.parent / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, out.parent / name)
    for path, nb in notebooks.items():
        student = student_version(nb)
        nbformat.write(student, out / path.name)
        n_regions = sum(len(solutions.regions(c.source)) for c in nb.cells if solutions.is_solution(c))
        points = sum(solutions.grading(c)["points"] for c in nb.cells if solutions.is_check(c))
        print(f"{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}/{path.name}: "
              f"{n_regions} stubs to write, {sum(map(solutions.is_check, nb.cells))} graded checks "
              f"({points:g} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
