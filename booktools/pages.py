"""The book's pages, in reading order, and what each holds: the one reader of _toc.yml and the one
parser of MyST fences. Every page rule walks this model; none brings a parser of its own.

    toc()               the pages of _toc.yml in reading order (on_disk(): every page file)
    page.cells          Cell: a lab's cells, or a chapter read as a notebook (its {code-cell}
                        blocks and the Markdown between them); cell.output_texts: what it prints
    page.fences         Fence: every fenced block of the page's Markdown, nested ones too: its
                        name, argument, options, body, first body line, span, depth, is_code,
                        text_lexer
    page.prose          Line: what a reader reads as text, each with its number, its cell, the
                        fences around it (line.folded) and whether it is a heading;
                        page.headings, page.paragraphs, page.title
    code_to_scan(root)  (file, first line, Python) of the code of every page and module

A page rule is a short function over these; the words a page shows unfolded, for example:

    [word for line in page.prose if not line.folded for word in re.findall(r"\\w+", line.text)]
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the built book's boxes hold at 1280 px (tests/browser measures them).
BOX_CHARS = 93  # an output box or a listing in the content column
BOXED_CHARS = 84  # a listing inside an admonition, dropdown, exercise or solution
WALL_LINES = 40  # a code cell shown unfolded and longer than this is a wall of code
LAB_CODE_LINES = 300  # a lab shows at most this many lines of code unfolded (issue 60)
TEXT_LEXERS = ("text", "none", "myst-ansi", "ipythontb", "console", "output")

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(.*)$")
CODE_DIRECTIVES = ("code-cell", "code-block", "code", "literalinclude")  # their body is code
VERBATIM_DIRECTIVES = CODE_DIRECTIVES + ("math", "mermaid", "raw")  # their body is not Markdown
HEADING = re.compile(r"^#+\s")
REFERENCES = re.compile(r"^#+\s+(?:References|Further reading|Bibliography)\b")  # looked up, not read
OPTION = re.compile(r"^:[\w-]+:")
LABEL = re.compile(r"^\(?[\w-]+\)=$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# -- a directive's options, and what a {literalinclude} shows --------------------------------

def option_lines(body: list[str]) -> int:
    """How many lines at the top of a directive's body are its options (`:key:` or a --- block)."""
    if body and body[0].strip() == "---":
        return next((i + 1 for i in range(1, len(body)) if body[i].strip() == "---"), 0)
    return next((i for i, line in enumerate(body) if not line.lstrip().startswith(":")), len(body))


def directive_options(body: list[str]) -> dict[str, str]:
    """The options at the top of a directive's body: `:key: value` lines, or a --- block."""
    options = {}
    for line in body[:option_lines(body)]:
        m = re.match(r"^\s*:([\w-]+):\s*(.*)$", line) or re.match(r"^([\w-]+):\s*(.*)$", line)
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


# -- the parts of a page ---------------------------------------------------------------------

@dataclass(frozen=True)
class Fence:
    """A fenced block of Markdown: code (```python) or a directive (```{note}, :::{solution} x)."""

    run: str  # the opening run of backticks, tildes or colons
    info: str  # what follows the run: "{code-block} text", "python" or ""
    body: tuple[str, ...]  # every line between the opening and the closing run
    first: int  # the body's first line: the page's line, or, in a lab, its cell's
    indent: int = 0  # columns before the opening run
    depth: int = 0  # how many fences enclose it
    cell: int | None = None  # the index of the page's cell that holds it

    @property
    def is_directive(self) -> bool:
        return self.info.startswith("{")

    @property
    def name(self) -> str:
        """The directive's name ("code-block"); "" for a plain fence."""
        return self.info[1:].split("}")[0] if self.is_directive else ""

    @property
    def argument(self) -> str:
        """The directive's argument ("text" of {code-block} text); a plain fence's whole info."""
        return self.info.split("}", 1)[1].strip() if self.is_directive and "}" in self.info else self.info

    @property
    def option_count(self) -> int:
        return option_lines(list(self.body)) if self.is_directive else 0

    @property
    def options(self) -> dict[str, str]:
        return directive_options(list(self.body)) if self.is_directive else {}

    @property
    def span(self) -> tuple[int, int]:
        """The lines of its opening and its closing run (one left open closes past the end)."""
        return self.first - 1, self.first + len(self.body)

    @property
    def content(self) -> list[tuple[int, str]]:
        """(line number, text) of the body after the directive's options."""
        return list(enumerate(self.body, self.first))[self.option_count:]

    @property
    def is_code(self) -> bool:
        """A plain fence (```python, ```text) or a directive of CODE_DIRECTIVES."""
        return not self.is_directive or self.name in CODE_DIRECTIVES

    @property
    def is_verbatim(self) -> bool:
        """Its body is not Markdown: no fence opens inside, and it holds no prose."""
        return not self.is_directive or self.name in VERBATIM_DIRECTIVES

    @property
    def classes(self) -> list[str]:
        return self.options.get("class", "").split()

    @property
    def folded(self) -> bool:
        """Shown closed until the reader opens it: a {dropdown}, or a directive of class dropdown."""
        return self.name == "dropdown" or "dropdown" in self.classes

    @property
    def text_lexer(self) -> str | None:
        """The text lexer the book shows the body in (TEXT_LEXERS); None for code, prose and the rest."""
        if not self.is_directive:
            words = self.info.split()
            return words[0] if words and words[0] in TEXT_LEXERS else None
        if self.name in ("code-block", "code"):
            words = self.argument.split()
            return words[0] if words and words[0] in TEXT_LEXERS else None
        if self.name == "literalinclude":
            language = self.options.get("language", "")
            return language if language in TEXT_LEXERS else None
        return None


@dataclass(frozen=True)
class Line:
    """A line of a page's prose: what a reader reads as text."""

    number: int  # the page's line, or, in a lab, its cell's
    text: str
    cell: int | None = None  # the index of the page's cell that holds it
    fences: tuple[Fence, ...] = ()  # the directives around it, outermost first
    heading: bool = False

    @property
    def folded(self) -> bool:
        """Inside a box the reader opens on purpose (a dropdown)."""
        return any(f.folded for f in self.fences)


@dataclass(frozen=True)
class Cell:
    """A cell of a page: a lab's, or a chapter's {code-cell} block or the Markdown between two."""

    index: int  # its place among the page's cells
    kind: str  # "code" or "markdown"
    source: str  # a chapter's code cell: its options blanked, so that lines keep their numbers
    line: int = 1  # the page's line of the source's first line (1 in a lab)
    metadata: dict = field(default_factory=dict)  # a chapter's code cell: {"tags": [...]}
    outputs: tuple[dict, ...] = ()
    execution_count: int | None = None
    in_lab: bool = True

    @property
    def where(self) -> str:
        """How messages name it: "cell 4" in a lab, "line 120" in a chapter."""
        return f"cell {self.index}" if self.in_lab else f"line {self.line}"

    @property
    def tags(self) -> list[str]:
        return list(self.metadata.get("tags", []))

    @property
    def output_texts(self) -> list[str]:
        """What its outputs print: streams, tracebacks, and text/plain where nothing richer
        (HTML, an image) is shown instead; ANSI colours taken out."""
        texts = []
        for out in self.outputs:
            data = out.get("data", {})
            if out.get("output_type") == "stream":
                texts.append(_joined(out.get("text", "")))
            elif out.get("output_type") == "error":
                texts.append("\n".join(out.get("traceback", [])))
            elif "text/plain" in data and not set(data) - {"text/plain"}:
                texts.append(_joined(data["text/plain"]))
        return [ANSI.sub("", t) for t in texts]


def _joined(text: str | list[str]) -> str:
    """A notebook's multiline string, stored as one string or as a list of lines."""
    return "".join(text) if isinstance(text, list) else text


@dataclass(frozen=True)
class _Record:
    """One line of Markdown as the parser classed it."""

    number: int
    text: str
    kind: str  # front matter, fence, code, option, label, comment, math, heading or text
    fences: tuple[int, ...]  # the indices (in the parse's fence list) of the fences around it


def _parse(text: str, cell: int | None = None, front_matter: bool = False) -> tuple[list[Fence], list[_Record]]:
    """The fences of Markdown `text` (in the order they open) and each of its lines, classed.

    A fence closes on a run of its character at least as long, with nothing after it (or at the
    end of the text); a colon fence opens only with a directive. Nothing opens inside a verbatim
    fence (code, math). Prose is what is left: not front matter, a fence's line, code, a
    directive's options, a label, an HTML comment or display math ($$)."""
    lines = text.split("\n")
    opened: list[dict] = []  # the fences open at this line, outermost first
    found: list[dict] = []
    records = []
    start = 0
    if front_matter and lines and lines[0] == "---" and "---" in lines[1:]:
        start = lines.index("---", 1) + 1
        records = [_Record(n, lines[n - 1], "front matter", ()) for n in range(1, start + 1)]
    in_math = in_comment = False
    for number, line in enumerate(lines[start:], start + 1):
        m = FENCE.match(line)
        top = opened[-1] if opened else None
        around = tuple(f["index"] for f in opened)
        if top and m and not m.group(3) and m.group(2)[0] == top["run"][0] and len(m.group(2)) >= len(top["run"]):
            top["end"] = number
            opened.pop()
            records.append(_Record(number, line, "fence", around[:-1]))
            continue
        if top and top["verbatim"]:
            records.append(_Record(number, line, "code", around))
            continue
        if m and (m.group(2)[0] != ":" or m.group(3)):
            info = m.group(3).strip()
            new = {"index": len(found), "run": m.group(2), "info": info, "start": number,
                   "indent": len(m.group(1)), "depth": len(opened), "end": None}
            probe = Fence(new["run"], info, (), 0)
            new["verbatim"] = probe.is_verbatim
            new["options_end"] = number + (option_lines(lines[number:]) if probe.is_directive else 0)
            found.append(new)
            opened.append(new)
            records.append(_Record(number, line, "fence", around))
            continue
        stripped = line.strip()
        if top and number <= top["options_end"]:
            kind = "option"
        elif in_comment or stripped.startswith("<!--") and "-->" not in stripped:
            in_comment = "-->" not in line if in_comment else True
            kind = "comment"
        elif stripped.startswith("$$"):
            in_math = not (in_math or stripped.count("$$") >= 2 and len(stripped) > 2)
            kind = "math"
        elif in_math:
            kind = "math"
        elif HEADING.match(stripped):
            kind = "heading"
        elif OPTION.match(stripped):
            kind = "option"
        elif LABEL.match(stripped):
            kind = "label"
        else:
            kind = "text"
            line = re.sub(r"<!--.*?-->", "", line)
        records.append(_Record(number, line, kind, around))
    fences = [Fence(f["run"], f["info"], tuple(lines[f["start"]:(f["end"] or len(lines) + 1) - 1]),
                    f["start"] + 1, f["indent"], f["depth"], cell) for f in found]
    return fences, records


@dataclass(frozen=True)
class Page:
    """One page of the book: its name in _toc.yml (labs/04_ddp), its file and its part's caption;
    `source`, when given, stands for the file's text."""

    name: str
    path: Path
    part: str = ""
    source: str | None = field(default=None, repr=False, compare=False)

    @property
    def is_lab(self) -> bool:
        return self.path.suffix == ".ipynb"

    @property
    def file(self) -> str:
        """The page's file from the book's root: labs/04_ddp.ipynb."""
        return self.name + self.path.suffix

    @cached_property
    def text(self) -> str:
        return self.source if self.source is not None else self.path.read_text()

    @cached_property
    def _parsed(self) -> tuple[list[Fence], list[tuple[int | None, _Record]], list[Cell]]:
        """The page's fences, its classed lines (each with its cell's index) and its cells."""
        return self._parse_lab() if self.is_lab else self._parse_chapter()

    def _parse_chapter(self) -> tuple[list[Fence], list[tuple[int | None, _Record]], list[Cell]]:
        """A MyST page read as a notebook: its top-level {code-cell} blocks, the Markdown between."""
        fences, records = _parse(self.text, front_matter=True)
        lines, cells, after = self.text.split("\n"), [], 1  # after: the first line not yet in a cell

        def markdown(upto: int) -> None:
            if upto > after:
                cells.append(Cell(len(cells), "markdown", "\n".join(lines[after - 1:upto - 1]), after,
                                  in_lab=False))

        for f in fences:
            if f.depth == 0 and f.name == "code-cell":
                markdown(f.first - 1)
                skip = f.option_count
                tags = re.findall(r"[\w-]+", f.options.get("tags", ""))
                cells.append(Cell(len(cells), "code", "\n".join([""] * skip + list(f.body[skip:])), f.first,
                                  {"tags": tags} if tags else {}, in_lab=False))
                after = f.first + len(f.body) + 1
        markdown(len(lines) + 1)

        def cell_of(number: int) -> int:
            return max((c.index for c in cells if c.line <= number), default=0)

        fences = [Fence(f.run, f.info, f.body, f.first, f.indent, f.depth, cell_of(f.first - 1)) for f in fences]
        return fences, [(cell_of(r.number), r) for r in records], cells

    def _parse_lab(self) -> tuple[list[Fence], list[tuple[int | None, _Record]], list[Cell]]:
        """A notebook: its cells, and the Markdown of each markdown cell parsed on its own."""
        fences, records, cells = [], [], []
        for index, raw in enumerate(json.loads(self.text)["cells"]):
            source = _joined(raw["source"])
            cells.append(Cell(index, raw["cell_type"], source, 1, dict(raw.get("metadata", {})),
                              tuple(raw.get("outputs", ())), raw.get("execution_count")))
            if raw["cell_type"] == "markdown":
                found, lines = _parse(source, cell=index)
                shift = len(fences)
                fences += found
                records += [(index, _Record(r.number, r.text, r.kind, tuple(i + shift for i in r.fences)))
                            for r in lines]
        return fences, records, cells

    @property
    def cells(self) -> list[Cell]:
        return self._parsed[2]

    @property
    def code_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.kind == "code"]

    @property
    def fences(self) -> list[Fence]:
        """Every fence of the page's Markdown, nested ones too, in the order they open."""
        return self._parsed[0]

    @cached_property
    def prose(self) -> list[Line]:
        """What a reader reads as text, headings included; not a References section (looked up)."""
        fences, found, in_refs = self.fences, [], False
        for cell, record in self._parsed[1]:
            if record.kind == "heading":
                in_refs = bool(REFERENCES.match(record.text.strip()))
            if in_refs or record.kind not in ("text", "heading"):
                continue
            found.append(Line(record.number, record.text, cell, tuple(fences[i] for i in record.fences),
                              record.kind == "heading"))
        return found

    @property
    def headings(self) -> list[Line]:
        """Every heading of the page's Markdown, a References section's too."""
        return [Line(r.number, r.text, cell, tuple(self.fences[i] for i in r.fences), True)
                for cell, r in self._parsed[1] if r.kind == "heading"]

    @property
    def paragraphs(self) -> list[str]:
        """The prose's paragraphs, each on one line with its spaces squeezed."""
        found, run, last = [], [], None
        for line in self.prose + [Line(-1, "")]:
            if not line.text.strip() or (line.cell, line.number - 1) != last:
                if run:
                    found.append(" ".join(" ".join(run).split()))
                run = []
            if line.text.strip():
                run.append(line.text)
            last = (line.cell, line.number)
        return found

    @property
    def title(self) -> str:
        """The page's first level-one heading; the file's stem if it has none."""
        return next((line.text[2:].strip() for line in self.prose if re.match(r"^# .", line.text)),
                    self.path.stem)


# -- the pages -------------------------------------------------------------------------------

def page_at(path: Path, root: Path = ROOT) -> Page:
    """The page of a file, named from the book's root (or by its stem, outside it)."""
    path = Path(path)
    inside = path.resolve().is_relative_to(Path(root).resolve())
    name = path.resolve().relative_to(Path(root).resolve()).with_suffix("").as_posix() if inside else path.stem
    return Page(name, path)


def toc(root: Path = ROOT) -> list[Page]:
    """Every page of _toc.yml, in reading order: the root page (intro) first."""
    import yaml

    data = yaml.safe_load((root / "_toc.yml").read_text())

    def page(name: str, part: str) -> Page:
        suffix = ".ipynb" if name.startswith("labs/") else ".md"
        return Page(name, root / f"{name}{suffix}", part)

    return [page(data["root"], "")] + [page(c["file"], part["caption"]) for part in data.get("parts", [])
                                       for c in part["chapters"]] \
        + [page(c["file"], "") for c in data.get("chapters", [])]


def on_disk(root: Path = ROOT) -> list[Page]:
    """Every page file, listed in _toc.yml or not: the chapters, intro.md, then the labs."""
    paths = sorted((root / "chapters").glob("*.md")) + [root / "intro.md"] + sorted((root / "labs").glob("*.ipynb"))
    return [page_at(p, root) for p in paths if p.is_file()]


# -- the Python of every page and module ----------------------------------------------------

def as_python(text: str) -> str:
    """A notebook's or a MyST page's cell as plain Python: IPython magics and shell lines commented out."""
    return "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())


SCANNED = ("dplab", "labcode", "booktools", "teach", "benchmarks", "tools", "hub", "launch", "chapters")


def code_to_scan(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, first line, Python source) of the modules of SCANNED (chapters' scripts included),
    the labs' code cells ("labs/x.ipynb (cell 4)") and the code cells of the chapters and intro.md."""
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            found.append((str(path.relative_to(root)), 1, path.read_text()))
    pages = on_disk(root)
    for page in [p for p in pages if p.is_lab] + [p for p in pages if not p.is_lab]:
        for cell in page.code_cells:
            where = f"{page.file} (cell {cell.index})" if page.is_lab else page.file
            found.append((where, cell.line, as_python(cell.source)))
    return found
