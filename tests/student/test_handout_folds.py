"""make student's copy shows what the book folds: the stub the learner must fill (issue 34).
Here, not in make test, because make student's preprocessors need nbgrader (make test-student
installs it)."""
import nbformat
import pytest

from booktools.labs import labs
from teach import solutions, student
from teach.handout import YOUR_TURN

LABS = labs()


def collapsed(cell) -> bool:
    """Whether the book (tag hide-input or hide-cell) or JupyterLab (source_hidden) folds the
    cell's code."""
    return (bool({"hide-input", "hide-cell"} & set(cell.metadata.get("tags", [])))
            or bool(cell.metadata.get("jupyter", {}).get("source_hidden")))


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_the_learner_sees_every_stub_that_the_book_collapses(lab):
    """The book folds a cell that holds what the learner writes, so that its reader tries first
    (issue 34); make student's copy shows the stub in its place, which the learner must fill."""
    nb = nbformat.read(lab.path, as_version=4)
    handout = student.student_version(nb)
    theirs_by_id = {c.id: c for c in handout.cells}
    for i, ours in enumerate(nb.cells):
        if solutions.is_solution(ours) and solutions.regions(ours.source):
            theirs = theirs_by_id[ours.id]
            assert "raise NotImplementedError(" in theirs.source
            assert not collapsed(theirs), f"{lab.name} cell {i}: the stub is hidden from the learner"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_the_handout_drops_the_books_try_it_first_lines(lab):
    """'Try it first ... before you open the cell below' is for the book's reader; the
    learner's copy has an open stub there instead, and says so. The rest of each markdown
    cell stays."""
    nb = nbformat.read(lab.path, as_version=4)
    handout = student.student_version(nb)
    text = "\n".join(c.source for c in handout.cells if c.cell_type == "markdown")
    assert "Try it first" not in text and YOUR_TURN in text
    assert any("Try it first" in c.source for c in nb.cells), f"{lab.name} has no 'Try it first'"
    headings = [line for c in nb.cells if c.cell_type == "markdown"
                for line in c.source.splitlines() if line.startswith("#")]
    assert all(h in text for h in headings), "a heading went with a 'Try it first' line"
