"""What the book's pages hold, for the page rules: MyST fences and their options, the lines a
{literalinclude} shows, the widths of the boxes that show text, and the code of every page and module."""
import ast
import json
import re
from pathlib import Path

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(.*)$")
BOX_CHARS = 93  # an output box or a listing in the content column (tests/browser measures it)
BOXED_CHARS = 84  # a listing inside an admonition, dropdown, exercise or solution
TEXT_LEXERS = ("text", "none", "myst-ansi", "ipythontb", "console", "output")


def option_lines(body: list[str]) -> int:
    """How many lines at the top of a directive's body are its options (`:key:` or a --- block)."""
    if body and body[0].strip() == "---":
        return next((i + 1 for i in range(1, len(body)) if body[i].strip() == "---"), 0)
    return next((i for i, line in enumerate(body) if not line.lstrip().startswith(":")), len(body))


def directive_options(body: list[str]) -> dict[str, str]:
    """The `:key: value` options at the top of a directive's body."""
    options = {}
    for line in body[:option_lines(body)]:
        m = re.match(r"^\s*:([\w-]+):\s*(.*)$", line)
        if m:
            options[m.group(1)] = m.group(2).strip().strip("\"'")
    return options


def python_object(lines: list[str], name: str) -> list[str]:
    """The lines of a top-level function or class (or Class.method), as :pyobject: selects."""
    nodes = ast.parse("\n".join(lines)).body
    *outer, last = name.split(".")
    for part in outer:
        nodes = next(n for n in nodes if getattr(n, "name", None) == part).body
    node = next(n for n in nodes if getattr(n, "name", None) == last)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return lines[first - 1:node.end_lineno]


def selected_lines(spec: str, count: int) -> list[int]:
    """Zero-based indices that a :lines: spec like `1-3,5,8-` picks."""
    picked = []
    for part in spec.split(","):
        start, _, end = part.strip().partition("-")
        if "-" not in part:
            end = start
        picked += range(int(start or 1) - 1, int(end) if end else count)
    return picked


def included_lines(path: Path, options: dict[str, str]) -> list[tuple[int, str]]:
    """(line number in the file, text) of the part of `path` a literalinclude shows."""
    lines = path.read_text().splitlines()
    numbered = list(enumerate(lines, 1))
    if "pyobject" in options:
        part = python_object(lines, options["pyobject"])
        start = next(i for i in range(len(lines)) if lines[i:i + len(part)] == part)
        numbered = numbered[start:start + len(part)]
    if "lines" in options:
        numbered = [numbered[i] for i in selected_lines(options["lines"], len(numbered))]
    texts = [t for _, t in numbered]
    for key, after in (("start-at", False), ("start-after", True)):
        if key in options:
            i = next(i for i, t in enumerate(texts) if options[key] in t) + after
            numbered, texts = numbered[i:], texts[i:]
    for key, keep in (("end-before", False), ("end-at", True)):
        if key in options:
            i = next(i for i, t in enumerate(texts) if options[key] in t) + keep
            numbered, texts = numbered[:i], texts[:i]
    return numbered


def as_python(text: str) -> str:
    """A notebook's or a MyST page's cell as plain Python: IPython magics and shell lines commented out."""
    return "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())


def code_to_scan(root: Path) -> list[tuple[str, int, str]]:
    """(file, first line, Python source) of the code in dplab/, labcode/, benchmarks/, tools/, hub/,
    launch/, chapters' scripts, the labs' code cells and the code cells of the chapters and intro.md."""
    found = []
    for folder in ("dplab", "labcode", "benchmarks", "tools", "hub", "launch", "chapters"):
        for path in sorted((root / folder).rglob("*.py")):
            found.append((str(path.relative_to(root)), 1, path.read_text()))
    for path in sorted((root / "labs").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                found.append((f"{path.relative_to(root)} (cell {i})", 1, as_python("".join(cell["source"]))))
    for path in sorted((root / "chapters").glob("*.md")) + [root / "intro.md"]:
        if not path.exists():
            continue
        text = path.read_text()
        for m in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
            # the cell's options (`:key: value` lines, or a --- YAML block) become blank lines
            body = re.sub(r"\A(?:(?::[^\n]*\n)+|---\n.*?\n---\n)", lambda h: "\n" * h.group(0).count("\n"),
                          m.group(1), flags=re.S)
            found.append((str(path.relative_to(root)), text[: m.start(1)].count("\n") + 1, as_python(body)))
    return found
