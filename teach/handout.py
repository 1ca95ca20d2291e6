"""What the learner's copy of a lab shows beyond nbgrader's stubs, as an nbgrader preprocessor.

The book folds each solution cell, and each exercise's answer sits in a solution dropdown below a
"Try it first." line. The learner's copy unfolds the cells with the stubs, drops the dropdowns,
and says "Your turn." instead. `make student` runs it between nbgrader's ClearSolutions and
ClearOutput (teach.student); a course's nbgrader_config.py adds it to `nbgrader
generate_assignment` at the same place (teach.course), so both hand out the same notebooks.
"""
from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

DROPDOWN = re.compile(r"^:::\{solution\}.*?^:::[ \t]*$\n?", re.M | re.S)  # an exercise's answer
# The book's "Try it first." paragraph above a folded answer: the learner's copy has a stub there.
TRY_FIRST = re.compile(r"^\*\*Try it first\.\*\*.*?(?=\n\n|\Z)", re.M | re.S)
YOUR_TURN = ("**Your turn.** Fill in the stubs below (`raise NotImplementedError`); the checks "
             "after them test what you write.")


def show_code(cell) -> None:
    """Unfold a cell: the book folds what the learner writes with its output (tag hide-cell,
    and JupyterLab's source_hidden and outputs_hidden), so that its reader tries first; the
    learner gets the stub."""
    tags = [t for t in cell.metadata.get("tags", []) if t not in ("hide-input", "hide-cell")]
    if tags:
        cell.metadata["tags"] = tags
    else:
        cell.metadata.pop("tags", None)
    jupyter = cell.metadata.get("jupyter", {})
    jupyter.pop("source_hidden", None)
    jupyter.pop("outputs_hidden", None)
    if not jupyter:
        cell.metadata.pop("jupyter", None)


class Handout(NbGraderPreprocessor):
    """Unfold the solution cells; replace each exercise's answer with a "Your turn." line."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            show_code(cell)
        if cell.cell_type == "markdown":
            if ":::{solution}" in cell.source:
                cell.source = DROPDOWN.sub("", cell.source).rstrip("\n")
            cell.source = TRY_FIRST.sub(YOUR_TURN, cell.source)
        return cell, resources
