"""make student, end to end (make test-student): every lab's student notebook is the lab without
its solutions, and pasting them back gives the lab again; every launch button of the book opens
a page of the handout. Scoring the handout, the solutions and the plausible mistakes is make
test-nbgrader's (tests/nbgrader), through nbgrader's own commands; what only our own grader
does is test_own_grader.py's."""
import nbformat
import pytest

from booktools.labs import labs
from booktools.pages import ROOT, toc
from teach import solutions
from tests.support.grading import pasted_back

LABS = labs()


def test_nbgrader_changed_no_version_that_requirements_txt_pins():
    from importlib.metadata import version

    assert version("nbgrader") == "0.9.6"
    pins = [line.split("#")[0].strip().split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()]
    for name, pinned in (p for p in pins if len(p) == 2):
        assert version(name).split("+")[0] == pinned, name  # torch's local wheel is 2.13.0+cpu


def test_every_launch_button_of_the_book_opens_a_page_of_the_handout(handout):
    pages = toc()
    assert len(pages) > len(LABS)
    for page in pages:
        assert (handout.parent / page.file).is_file(), page.name


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_the_student_notebook_is_the_lab_without_its_solutions(handout, lab, tmp_path):
    ours, theirs = nbformat.read(lab.path, as_version=4), nbformat.read(handout / lab.name, as_version=4)
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
    back = nbformat.read(pasted_back(handout, lab.name, tmp_path.name), as_version=4)
    assert [c.source for c in back.cells if c.cell_type == "code"] == \
           [c.source for c in ours.cells if c.cell_type == "code"]
