"""Text the book shows as printed (outputs, listings) fits its box at 1280 px, checked without a browser.

An output box or a text listing of the built book holds BOX_CHARS monospace characters at
1280 px, and a listing inside an admonition, dropdown, exercise or solution holds BOXED_CHARS
(tests/browser measures both, and fails on any box that scrolls sideways). Checked here, from
the sources, so that `make test-kit` keeps the limit: every lab's stored outputs (streams,
text/plain, and the tracebacks of cells that fail on purpose), and the text listings of the
chapters, intro.md and the labs' Markdown (a fence in a text lexer, a {code-block} or
{literalinclude} in one). A line too long is to be rewrapped where it is printed or written.
HTML outputs (pandas tables) and the chapters' outputs, made when the book is built, are the
browser's to judge.
"""
from pathlib import Path

import nbformat
import pytest

from booktools.pages import BOX_CHARS, BOXED_CHARS, ROOT, Fence, Page, included_lines, on_disk, page_at

CHAPTERS = [page for page in on_disk() if not page.is_lab]
LABS = [page for page in on_disk() if page.is_lab]


def shown(path: Path) -> str:
    """A path as messages name it: from the repository's root where it lies there."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def too_long(where: str, numbered, limit: int) -> list[str]:
    """One message per (number, line) longer than `limit`; `where` names it from its number {n}."""
    return [f"{where.format(n=n)}: {len(line)} characters (limit {limit}): {line[:50]!r}…"
            for n, line in numbered if len(line) > limit]


def listing_offenders(page: Page, fences: list[Fence], where: str) -> list[str]:
    """Too-long lines of the text listings among a page's `fences` (named `where` in messages),
    and of the text files they include; a listing inside another fence has the narrower box."""
    found = []
    for fence in fences:
        if not fence.text_lexer:
            continue
        limit = BOXED_CHARS if fence.depth else BOX_CHARS
        if fence.name == "literalinclude":
            target = (page.path.parent / fence.argument).resolve()
            lines = included_lines(target, fence.options)
            found += too_long(f"{shown(target)}, line {{n}} (included by {where})", lines, limit)
        else:
            found += too_long(where + ", line {n}", fence.content, limit)
    return found


def lab_offenders(page: Page) -> list[str]:
    """Too-long lines of a lab's stored outputs and of its Markdown's text listings."""
    name = shown(page.path)
    found = []
    for cell in page.cells:
        if cell.kind == "code":
            for text in cell.output_texts:
                found += too_long(f"{name} cell {cell.index}, output line {{n}}",
                                  enumerate(text.splitlines(), 1), BOX_CHARS)
        elif cell.kind == "markdown":
            fences = [f for f in page.fences if f.cell == cell.index]
            found += listing_offenders(page, fences, f"{name} cell {cell.index}")
    return found


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_lab_outputs_fit_their_box(page):
    offenders = lab_offenders(page)
    if offenders:
        pytest.fail(f"wider than a box's {BOX_CHARS} characters, rewrap where printed:\n"
                    + "\n".join(offenders), pytrace=False)


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.path.name)
def test_chapter_listings_fit_their_box(page):
    offenders = listing_offenders(page, page.fences, shown(page.path))
    if offenders:
        pytest.fail("wider than their box, rewrap:\n" + "\n".join(offenders), pytrace=False)


def test_the_check_finds_long_outputs_and_listings(tmp_path):
    """The broken variants: a stored stream, a text/plain result, a traceback and a listing,
    each one character too long (and a nested listing over the narrower limit); code, HTML
    results and ANSI colour codes are not judged."""
    wide, boxed = "x" * (BOX_CHARS + 1), "y" * (BOXED_CHARS + 1)
    (tmp_path / "out.txt").write_text(f"ok\n{wide}\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print()", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="ok\n" + wide + "\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": wide}),
            nbformat.v4.new_output("execute_result", data={"text/plain": wide, "text/html": "<b/>"}),
            nbformat.v4.new_output("error", ename="E", evalue="",
                                   traceback=["\x1b[31m" + wide[1:] + "\x1b[0m", "ok", wide]),
        ]),
        nbformat.v4.new_markdown_cell(f"```text\n{wide}\n```\n```python\n{wide}\n```"),
        nbformat.v4.new_markdown_cell(f":::{{dropdown}} More\n```{{code-block}} text\n{boxed}\n"
                                      "```\n:::\n```{literalinclude} out.txt\n:language: text\n```"),
    ])
    nbformat.write(nb, tmp_path / "lab.ipynb")
    found = "\n".join(lab_offenders(page_at(tmp_path / "lab.ipynb")))
    assert [line.split(":")[0] for line in found.splitlines()] == [
        "lab.ipynb cell 0, output line 2", "lab.ipynb cell 0, output line 1",
        "lab.ipynb cell 0, output line 3",
        "lab.ipynb cell 1, line 2", "lab.ipynb cell 2, line 3",
        "out.txt, line 2 (included by lab.ipynb cell 2)"], found
    assert f"(limit {BOXED_CHARS})" in found.splitlines()[4], found
