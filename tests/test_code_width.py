"""Code the book shows stays within 88 columns, so that it fits the page without scrolling.

Checked: the code blocks and code cells of the chapters and intro.md, the parts of files
they include with `{literalinclude}` (options start-at, start-after, end-before, end-at,
lines, pyobject), and every lab's code cells. Text includes (benchmark tables) and outputs
are not code.
"""
from pathlib import Path

import nbformat
import pytest

from tests.support.pages import FENCE, directive_options, included_lines, option_lines

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 88
CHAPTERS = sorted((ROOT / "chapters").glob("*.md")) + [ROOT / "intro.md"]
LABS = sorted((ROOT / "labs").glob("*.ipynb"))


def fenced_blocks(text: str):
    """Yield (info, first body line number, body lines, indent) of each fence, nested ones too."""
    lines = text.splitlines()
    stack = []  # open fences: [char run, info, start line, body, indent]
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        top = stack[-1] if stack else None
        if top and m and not m.group(3) and m.group(2)[0] == top[0][0] and len(m.group(2)) >= len(top[0]):
            stack.pop()
            yield top[1], top[2], top[3], top[4]
            continue
        if top and is_code(top[1]):
            top[3].append(line)
            continue
        if m and m.group(2)[0] != ":" or m and m.group(3):
            stack.append([m.group(2), m.group(3).strip(), number + 1, [], len(m.group(1))])
        elif top:
            top[3].append(line)


def is_code(info: str) -> bool:
    """Whether a fence's body is code: a language name or none, a code cell, block or include."""
    if info.startswith("{"):
        return info.split("}")[0] + "}" in ("{code-cell}", "{code-block}", "{code}", "{literalinclude}")
    return True












def too_wide(where: str, numbered) -> list[str]:
    """One message per line longer than LIMIT; `where` names the line from its number {n}."""
    return [f"{where.format(n=n)}: {len(t)} columns (limit {LIMIT})" for n, t in numbered if len(t) > LIMIT]


def chapter_offenders(path: Path) -> list[str]:
    """Too-wide lines of a chapter's code and of the code it includes."""
    name = path.relative_to(ROOT).as_posix()
    found = []
    for info, first, body, indent in fenced_blocks(path.read_text()):
        if not is_code(info):
            continue
        if info.startswith("{literalinclude}"):
            target = (path.parent / info.split("}", 1)[1].strip()).resolve()
            options = directive_options(body)
            if options.get("language", "") in ("text", "none"):
                continue  # a text file (a benchmark's table), not code
            if target.is_relative_to(ROOT / "labcode"):
                continue  # exported from a lab's cells, which the lab cases check
            shown = included_lines(target, options)
            found += too_wide(f"{target.relative_to(ROOT)}:{{n}} (included by {name})", shown)
        else:
            skip = option_lines(body) if info.startswith("{") else 0
            code = [(first + i, t[indent:]) for i, t in enumerate(body)][skip:]
            found += too_wide(name + ":{n}", code)
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_code_fits_88_columns(path):
    offenders = chapter_offenders(path)
    if offenders:
        pytest.fail("rewrap these lines:\n" + "\n".join(offenders), pytrace=False)


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_lab_code_cells_fit_88_columns(path):
    nb = nbformat.read(path, as_version=4)
    offenders = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            numbered = enumerate(cell.source.splitlines(), 1)
            offenders += too_wide(f"{path.relative_to(ROOT)} cell {index}, line {{n}}", numbered)
    if offenders:
        pytest.fail("rewrap these lines:\n" + "\n".join(offenders), pytrace=False)


MAX_LINES = 40  # tests/browser/test_reading_rules.py checks the same on the built pages
FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def walls(nb) -> list[str]:
    """Code cells a reader sees unfolded that are longer than MAX_LINES lines."""
    return [f"cell {i}: {len(c.source.rstrip().splitlines())} lines"
            for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and not FOLDED & set(c.metadata.get("tags", []))
            and len(c.source.rstrip().splitlines()) > MAX_LINES]


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_no_unfolded_lab_code_cell_is_a_wall(path):
    # The same rule as the built-book test, here so that it fails in seconds, not after
    # `make book`. Shorten the cell, split it, or fold it with tag hide-input.
    offenders = walls(nbformat.read(path, as_version=4))
    assert offenders == [], f"{path.name}: longer than {MAX_LINES} lines, unfolded"


def test_wall_check_counts_only_unfolded_cells():
    long = "\n".join(["%%px"] + ["x = 1"] * MAX_LINES)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(long),
        nbformat.v4.new_code_cell(long, metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell("\n".join(["x = 1"] * MAX_LINES))])
    assert walls(nb) == [f"cell 0: {MAX_LINES + 1} lines"]


def test_width_check_finds_long_lines_in_fences_nested_in_prose():
    text = "::::{dropdown} Answer\n```python\n" + "x" * 89 + "\n```\n::::\n````{admonition} A\n" \
           "```{code-cell} ipython3\nok\n```\n````\n```text\n" + "y" * 100 + "\n```\n"
    blocks = [(info, first, body) for info, first, body, _ in fenced_blocks(text) if is_code(info)]
    assert [(info, first, len(body[0])) for info, first, body in blocks] == [
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
