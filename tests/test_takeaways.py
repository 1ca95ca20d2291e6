"""Every measured plot of a lab has a takeaway box right under it (tools/CONTRIBUTING_LABS.md,
"How a page reads"): dplab.plots.takeaway in a cell whose output nbval does not compare and
whose code is folded, in the book and in JupyterLab."""
import re

import pytest

from booktools.pages import Cell, on_disk

LABS = [page for page in on_disk() if page.is_lab]


def measure_cells(cells: list[Cell]) -> list[int]:
    """Indexes of the cells of a lab's Measure sections (a "## Measure" heading up to the next
    "## " heading)."""
    inside, found = False, []
    for i, cell in enumerate(cells):
        if cell.kind == "markdown":
            for line in cell.source.splitlines():
                if re.match(r"## ", line):
                    inside = line.startswith("## Measure")
        if inside:
            found.append(i)
    return found


def takeaway_problems(cells: list[Cell]) -> list[str]:
    """What breaks the rule of a lab's takeaways: each Measure section has one, every plot of a
    measurement there (its output not compared) has one right under it, and a takeaway cell's
    output is not compared and its code is folded."""
    problems = []
    is_box = [c.kind == "code" and "takeaway(" in c.source for c in cells]
    measure = measure_cells(cells)
    if not measure:
        problems.append("no Measure section (every lab has one, headed \"## Measure\")")
    elif not any(is_box[i] for i in measure):
        problems.append("a Measure section without a takeaway")
    for i in measure:
        cell = cells[i]
        if "figure" in cell.metadata.get("mystnb", {}) and "nbval-ignore-output" in cell.tags:
            if not (i + 1 < len(cells) and is_box[i + 1]):
                problems.append(f"cell {i}: a measured plot with no takeaway right under it")
    for i, cell in enumerate(cells):
        if is_box[i]:
            if not {"nbval-ignore-output", "hide-input"} <= set(cell.tags):
                problems.append(f"cell {i}: a takeaway not tagged nbval-ignore-output, hide-input")
            if not cell.metadata.get("jupyter", {}).get("source_hidden"):
                problems.append(f"cell {i}: a takeaway whose code JupyterLab does not fold")
    return problems


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.path.stem)
def test_every_measured_plot_of_a_lab_has_a_takeaway_under_it(lab):
    assert takeaway_problems(lab.cells) == []


def test_the_takeaway_rule_finds_a_plot_without_its_box():
    plot = Cell(0, "code", "plt.show()", metadata={
        "tags": ["nbval-ignore-output"], "mystnb": {"figure": {"caption": "c"}}})
    box = Cell(0, "code", "takeaway(text)\nassert x", metadata={
        "tags": ["nbval-ignore-output", "hide-input"], "jupyter": {"source_hidden": True}})
    head = Cell(0, "markdown", "## Measure")
    tail = Cell(0, "markdown", "## Takeaways")
    assert takeaway_problems([head, plot, box, tail]) == []
    assert takeaway_problems([head, plot, tail]) == [
        "a Measure section without a takeaway",
        "cell 1: a measured plot with no takeaway right under it"]
    shown = Cell(0, "code", "takeaway(text)")
    assert takeaway_problems([head, plot, shown, tail]) == [
        "cell 2: a takeaway not tagged nbval-ignore-output, hide-input",
        "cell 2: a takeaway whose code JupyterLab does not fold"]
