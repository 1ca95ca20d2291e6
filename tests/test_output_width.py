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
import re
from pathlib import Path

import nbformat
import pytest
from tests.support.pages import BOX_CHARS, BOXED_CHARS, FENCE, TEXT_LEXERS, directive_options, included_lines, option_lines

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md")) + [ROOT / "intro.md"]
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def shown(path: Path) -> str:
    """A path as messages name it: from the repository's root where it lies there."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def too_long(where: str, numbered, limit: int) -> list[str]:
    """One message per (number, line) longer than `limit`; `where` names it from its number {n}."""
    return [f"{where.format(n=n)}: {len(line)} characters (limit {limit}): {line[:50]!r}…"
            for n, line in numbered if len(line) > limit]


def fences(text: str):
    """Yield (info, first body line number, body lines, nested) of every fence, nested ones too;
    `nested`: inside another fence (an admonition, dropdown, exercise or solution)."""
    stack = []  # open fences: [char run, info, first body line, body]
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        top = stack[-1] if stack else None
        if top and m and not m.group(3) and m.group(2)[0] == top[0][0] and len(m.group(2)) >= len(top[0]):
            stack.pop()
            yield top[1], top[2], top[3], bool(stack)
            continue
        if top and not holds_blocks(top[1]):
            top[3].append(line)  # code or text: no fence opens inside it
            continue
        if m and (m.group(2)[0] != ":" or m.group(3)):
            stack.append([m.group(2), m.group(3).strip(), number + 1, []])
        elif top:
            top[3].append(line)


def holds_blocks(info: str) -> bool:
    """Whether a fence's body is Markdown with blocks of its own (an admonition, not code)."""
    name = info.split("}")[0] + "}" if info.startswith("{") else ""
    return name not in ("}", "{code-cell}", "{code-block}", "{code}", "{literalinclude}")


def text_lexer(info: str, body: list[str]) -> str | None:
    """The text lexer a fence shows its body in; None for code, prose and everything else."""
    words = info.split()
    if not words:
        return None
    if not info.startswith("{"):
        return words[0] if words[0] in TEXT_LEXERS else None
    name, arg = words[0], words[1] if len(words) > 1 else ""
    if name in ("{code-block}", "{code}"):
        return arg if arg in TEXT_LEXERS else None
    if name == "{literalinclude}":
        language = directive_options(body).get("language", "")
        return language if language in TEXT_LEXERS else None
    return None


def listing_offenders(text: str, page: str, base: Path) -> list[str]:
    """Too-long lines of the text listings in Markdown `text` (of `page`, in folder `base`),
    and of the text files they include."""
    found = []
    for info, first, body, nested in fences(text):
        if not text_lexer(info, body):
            continue
        limit = BOXED_CHARS if nested else BOX_CHARS
        if info.startswith("{literalinclude}"):
            target = (base / info.split("}", 1)[1].strip()).resolve()
            lines = included_lines(target, directive_options(body))
            found += too_long(f"{shown(target)}, line {{n}} (included by {page})", lines, limit)
        else:
            skip = option_lines(body) if info.startswith("{") else 0
            found += too_long(page + ", line {n}", list(enumerate(body, first))[skip:], limit)
    return found


def output_texts(cell) -> list[str]:
    """The printed text of a code cell's outputs: streams, tracebacks, and text/plain where
    nothing richer (HTML, an image) is shown instead."""
    texts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            texts.append(out.text)
        elif out.output_type == "error":
            texts.append("\n".join(out.traceback))
        elif "data" in out and "text/plain" in out.data and not set(out.data) - {"text/plain"}:
            texts.append(out.data["text/plain"])
    return [ANSI.sub("", t) for t in texts]


def lab_offenders(path: Path) -> list[str]:
    """Too-long lines of a lab's stored outputs and of its Markdown's text listings."""
    name = shown(path)
    found = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "code":
            for text in output_texts(cell):
                found += too_long(f"{name} cell {index}, output line {{n}}",
                                  enumerate(text.splitlines(), 1), BOX_CHARS)
        elif cell.cell_type == "markdown":
            found += listing_offenders(cell.source, f"{name} cell {index}", path.parent)
    return found


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_lab_outputs_fit_their_box(path):
    offenders = lab_offenders(path)
    if offenders:
        pytest.fail(f"wider than a box's {BOX_CHARS} characters, rewrap where printed:\n"
                    + "\n".join(offenders), pytrace=False)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_listings_fit_their_box(path):
    offenders = listing_offenders(path.read_text(), shown(path), path.parent)
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
    found = "\n".join(lab_offenders(tmp_path / "lab.ipynb"))
    assert [line.split(":")[0] for line in found.splitlines()] == [
        "lab.ipynb cell 0, output line 2", "lab.ipynb cell 0, output line 1",
        "lab.ipynb cell 0, output line 3",
        "lab.ipynb cell 1, line 2", "lab.ipynb cell 2, line 3",
        "out.txt, line 2 (included by lab.ipynb cell 2)"], found
    assert f"(limit {BOXED_CHARS})" in found.splitlines()[4], found
