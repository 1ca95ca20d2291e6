"""Code the book shows stays within 88 columns, so that it fits the page without scrolling.

Checked: the code blocks and code cells of the chapters and intro.md, the parts of files
they include with `{literalinclude}` (options start-at, start-after, end-before, end-at,
lines, pyobject), and every lab's code cells. Text includes (benchmark tables) and outputs
are not code.
"""
from pathlib import Path

import nbformat
import pytest

from booktools.pages import ROOT, WALL_LINES, Cell, Page, included_lines, on_disk, option_lines

LIMIT = 88
CHAPTERS = [page for page in on_disk() if not page.is_lab]
LABS = [page for page in on_disk() if page.is_lab]


def too_wide(where: str, numbered) -> list[str]:
    """One message per line longer than LIMIT; `where` names the line from its number {n}."""
    return [f"{where.format(n=n)}: {len(t)} columns (limit {LIMIT})" for n, t in numbered if len(t) > LIMIT]


def chapter_offenders(page: Page) -> list[str]:
    """Too-wide lines of a chapter's code and of the code it includes."""
    name = page.file
    found = []
    for fence in page.fences:
        if not fence.is_code:
            continue
        if fence.name == "literalinclude":
            target = (page.path.parent / fence.argument).resolve()
            if fence.options.get("language", "") in ("text", "none"):
                continue  # a text file (a benchmark's table), not code
            if target.is_relative_to(ROOT / "labcode"):
                continue  # exported from a lab's cells, which the lab cases check
            shown = included_lines(target, fence.options)
            found += too_wide(f"{target.relative_to(ROOT)}:{{n}} (included by {name})", shown)
        else:
            found += too_wide(name + ":{n}", [(n, t[fence.indent:]) for n, t in fence.content])
    return found


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.path.name)
def test_chapter_code_fits_88_columns(page):
    offenders = chapter_offenders(page)
    if offenders:
        pytest.fail("rewrap these lines:\n" + "\n".join(offenders), pytrace=False)


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_lab_code_cells_fit_88_columns(page):
    offenders = []
    for cell in page.code_cells:
        numbered = enumerate(cell.source.splitlines(), 1)
        offenders += too_wide(f"{page.file} cell {cell.index}, line {{n}}", numbered)
    if offenders:
        pytest.fail("rewrap these lines:\n" + "\n".join(offenders), pytrace=False)


FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def walls(cells: list[Cell]) -> list[str]:
    """Code cells a reader sees unfolded that are longer than WALL_LINES lines (the built-book
    test, tests/browser/test_reading_rules.py, checks the same on the built pages)."""
    return [f"cell {c.index}: {len(c.source.rstrip().splitlines())} lines" for c in cells
            if c.kind == "code" and not FOLDED & set(c.tags) and len(c.source.rstrip().splitlines()) > WALL_LINES]


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_no_unfolded_lab_code_cell_is_a_wall(page):
    # The same rule as the built-book test, here so that it fails in seconds, not after
    # `make book`. Shorten the cell, split it, or fold it with tag hide-input.
    offenders = walls(page.cells)
    assert offenders == [], f"{page.path.name}: longer than {WALL_LINES} lines, unfolded"


def test_wall_check_counts_only_unfolded_cells():
    long = "\n".join(["%%px"] + ["x = 1"] * WALL_LINES)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(long),
        nbformat.v4.new_code_cell(long, metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell("\n".join(["x = 1"] * WALL_LINES))])
    page = Page("lab", Path("lab.ipynb"), source=nbformat.writes(nb))
    assert walls(page.cells) == [f"cell 0: {WALL_LINES + 1} lines"]


def test_width_check_finds_long_lines_in_fences_nested_in_prose():
    text = "::::{dropdown} Answer\n```python\n" + "x" * 89 + "\n```\n::::\n````{admonition} A\n" \
           "```{code-cell} ipython3\nok\n```\n````\n```text\n" + "y" * 100 + "\n```\n"
    blocks = [f for f in Page("t", Path("t.md"), source=text).fences if f.is_code]
    assert [(f.info, f.first, len(f.body[0])) for f in blocks] == [
        ("python", 3, 89), ("{code-cell} ipython3", 8, 2), ("text", 12, 100)]


def test_literalinclude_selects_what_sphinx_shows(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\n\n\n@dec\ndef f():\n    return 1\n\n\nclass C:\n    def g(self):\n"
                   "        pass\n")
    assert [n for n, _ in included_lines(src, {"pyobject": "f"})] == [4, 5, 6]
    assert [n for n, _ in included_lines(src, {"pyobject": "C.g"})] == [10, 11]
    assert [n for n, _ in included_lines(src, {"start-at": "def f", "end-before": "class"})] == [5, 6, 7, 8]
    assert [n for n, _ in included_lines(src, {"lines": "2-3,9-"})] == [2, 3, 9, 10, 11]


def test_code_cell_options_are_not_code():
    assert option_lines(["---", "tags: [hide-input]", "---", "x = 1"]) == 3
    assert option_lines([":tags: [remove-input]", ":mystnb:", ":  figure:", "x = 1"]) == 3
    assert option_lines(["x = 1"]) == 0
