"""The labs' solution regions and graded checks (teach.solutions), read without running a lab:
every lab has both, each region's stub still parses, and pasting the region back gives the lab's
code again. make test-student runs the student notebooks; this needs no nbgrader."""
import ast
import re

import nbformat
import pytest

from booktools.labs import labs
from booktools.pages import ROOT
from teach import solutions

LABS = [lab.path for lab in labs()]


def python_of(source: str) -> str:
    """A cell's Python, without its IPython magics (%%px, %time, !cmd)."""
    return "\n".join("" if re.match(r"\s*[%!]", line) else line for line in source.split("\n"))


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_every_lab_marks_what_the_learner_writes_and_what_is_graded(lab):
    nb = nbformat.read(lab, as_version=4)
    assert solutions.check_notebook(nb, lab.name) == []
    for i, cell in enumerate(nb.cells):
        if not solutions.is_solution(cell):
            continue
        stubbed = solutions.stub(cell.source, f"cell {i}")
        ast.parse(python_of(stubbed))  # the learner gets code that runs up to the stub
        assert stubbed.count("raise NotImplementedError()") == len(solutions.regions(cell.source))
        assert solutions.paste_back(stubbed, cell.source) == cell.source
        assert "SOLUTION" not in stubbed  # the hint line stays, for the learner


def test_labcode_has_no_markers():
    for path in (ROOT / "labcode").glob("*.py"):
        assert "SOLUTION" not in path.read_text(), path.name


@pytest.mark.parametrize("source, message", [
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "write the hint on the line above"),
    ("    # HINT: h\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "indented as the marker"),
    ("# HINT: h\nx = 1", "just above"),
    ("### BEGIN SOLUTION: h\nx = 1\n### END SOLUTION", "the hint on the line above it"),
    ("# HINT: h\n### BEGIN SOLUTION\nx = 1", "without an END"),
    ("x = 1\n### END SOLUTION", "without a BEGIN"),
    ("# HINT: h\n### BEGIN SOLUTION\n### END SOLUTION", "empty"),
    ("# HINT: h\n### BEGIN SOLUTION\n# HINT: h\n### BEGIN SOLUTION\nx\n### END SOLUTION",
     "inside another"),
    ("x = 1  # BEGIN SOLUTION here", "alone on its line"),
])
def test_a_malformed_region_is_refused_saying_where(source, message):
    with pytest.raises(ValueError, match=message):
        solutions.regions(source, "lab X, cell 3")


def test_a_region_outside_a_solution_cell_or_a_lab_without_checks_is_reported():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# HINT: h\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION")])
    problems = solutions.check_notebook(nb, "lab")
    assert any("not marked as a solution cell" in p for p in problems)
    assert any("no graded check" in p for p in problems)
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "a",
                                        "schema_version": 3, "locked": False}
    wide = nbformat.v4.new_code_cell("# HINT: " + "h" * 81 + "\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION",
                                     metadata={"nbgrader": {**nb.cells[0].metadata["nbgrader"], "grade_id": "b"}})
    nb.cells.append(wide)
    assert any("wider than 88" in p for p in solutions.check_notebook(nb, "lab"))


def test_stub_and_paste_back_keep_the_indent_and_the_rest_of_the_cell():
    src = ("def f(x):\n    y = 2\n    # HINT: double x\n    ### BEGIN SOLUTION\n    y = 2 * x\n"
           "    ### END SOLUTION\n    return y")
    stubbed = solutions.stub(src)
    assert stubbed == ("def f(x):\n    y = 2\n    # HINT: double x\n    # YOUR CODE HERE\n"
                       "    raise NotImplementedError()\n    return y")
    namespace = {}
    exec(stubbed, namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)
    assert solutions.paste_back(stubbed, src) == src
    with pytest.raises(ValueError, match="not in the cell"):
        solutions.paste_back("def f(x):\n    return x", src)



@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_what_the_learner_writes_is_collapsed_below_a_try_it_first_line(lab):
    """Answers behind a click (issues 34 and 46): a cell with a solution region, and every folded
    cell below a 'Try it first' line, is folded with its output in the book (tag hide-cell: an
    output shows the answer too) and in JupyterLab (metadata jupyter.source_hidden and
    outputs_hidden), and the markdown above a solution region asks the reader to try first."""
    nb = nbformat.read(lab, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        above = next(c for c in reversed(nb.cells[:i]) if c.cell_type == "markdown")
        tags = cell.metadata.get("tags", [])
        if solutions.regions(cell.source):
            assert "Try it first" in above.source, f"{lab.name} cell {i}: no 'Try it first' above it"
        elif not ("Try it first" in above.source and {"hide-input", "hide-cell"} & set(tags)):
            continue
        assert "hide-cell" in tags, f"{lab.name} cell {i}: its code or output is not folded in the book"
        jupyter = cell.metadata.get("jupyter", {})
        assert jupyter.get("source_hidden") and jupyter.get("outputs_hidden"), \
            f"{lab.name} cell {i}: open in JupyterLab"



def asserting_functions(nb) -> set[str]:
    """Names of the functions a lab defines whose bodies assert (Lab 2's report, ...)."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        names |= {f.name for f in tree.body if isinstance(f, ast.FunctionDef)  # not methods
                  and any(isinstance(n, ast.Assert) for n in ast.walk(f))}
    return names


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_every_graded_check_asserts(lab):
    """A graded check that asserts nothing passes with the stubs in place: a cell split in two
    must leave its nbgrader metadata on the half that holds the asserts (or the calls of the
    lab's own asserting functions)."""
    nb = nbformat.read(lab, as_version=4)
    checkers = asserting_functions(nb)
    for i, cell in enumerate(nb.cells):
        if solutions.is_check(cell):
            calls = set(re.findall(r"(?<![\w.])(\w+)\(", cell.source))  # f(...), not x.f(...)
            assert re.search(r"^\s*assert\b", cell.source, re.M) or calls & checkers, (
                f"{lab.name} cell {i} ({solutions.grading(cell)['grade_id']}) asserts nothing")
