"""Find the numbers typed by hand in the book's prose: chapters, intro.md and the labs' markdown.

A number in prose is either computed (a chapter glues it: {glue:text}`name`), or it is not a
quantity at all. What is not a quantity is recognised by rule (`structural`), never by value:
  - not prose: code, math ($...$, $$, {math}), inline code, roles ({glue}, {ref}, {term}, ...),
    directive options, labels, link targets, HTML tags, headings, the {glossary} and References
    sections (booktools.pages gives the prose; `prose_lines` takes out the rest);
  - a name: digits joined to letters (fp16, H100, ZeRO-1, x86_64), a version after a product
    name (torch 2.13, NCCL 2.10), a citation year (Goyal et al. 2017, Hockney (1994)), an
    identifier after its noun (rank 0, GPU 0, Lab 4, stage 3, exercise 2, ranks 0 and 1), a
    list item's number, a bit width (16-bit, 32 bits);
  - a constant of a formula written in prose: a number joined to a variable by an operator
    (2(p − 1)/p · n, 1 − q, s−0.5, 2n). An equals sign does not join: "p = 8" is an input
    the prose restates, and must be glued.

Everything else must be glued, tied to its constant (lab markdown cannot glue: JupyterLab shows
a {glue} role raw, so a lab ties the phrase to an expression in its facts, booktools.labs
`Lab.tied`), or sit on the short `ALLOWED` list with its reason. A lab states no rounded run
time of its own ("About N minutes", `LAB_TIME`): a rerun a few seconds longer would flip its
rounding. It opens with its reading time and a bound on its running time, "under N minutes",
N = `lab_run_bound` (the stored run's minutes times RUN_HEADROOM, rounded up), both tied.
The landing page glues each lab's time from lab_times.json.

Code comments (the labs' code cells and the chapters' code-cell blocks) follow the same rules, and
two more: a numbered step ("# 1. ...") and a man page's section (sbatch(1)) are names, and a comment
may restate a literal of its own cell ("# a 100 MB gradient" beside `100e6`), so that changing the
code flags the comment. A measurement typed into a comment (a band's record, a broken variant's
value) goes to benchmarks/results/ or to the test that shows it, and the comment points there.

    python -m booktools.numbers [PATH ...]    # the untreated numbers of some pages (default: all)
"""
from __future__ import annotations

import ast
import io
import json
import math
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

from booktools.labs import facts, labs
from booktools.pages import ROOT, Line, Page, on_disk, page_at

NOT_PROSE = ("glossary",)  # directives whose text is no prose here, beside the verbatim ones (math)
ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")
SUP = re.compile(r"<sup>([^<]*)</sup>")
SUB = re.compile(r"<sub>[^<]*</sub>")
SUPERSCRIPT = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻"
NUMBER = re.compile(
    r"(?<![\w.,])"  # not the tail of a word, a decimal or a thousands group
    r"(\d+(?:,\d{3})*(?:\.\d+)?(?:\^[−-]?\d+|[" + SUPERSCRIPT + r"]+)?)"
    r"(?![\w" + SUPERSCRIPT + r"]|[.,]\d)"
)
UNITS = ("B", "KB", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "ms", "s", "µs", "us", "k", "M", "x", "×")
VAR = r"[A-Za-zα-ωΑ-Ω𝓑ΨΣ](?:_\w{1,5})?(?![A-Za-z])"  # a variable: one letter, maybe a _subscript
OP = r"[−+·×*/^-]"
PRODUCTS = (r"torch|PyTorch|NCCL|MPICH|Python|CUDA|HIP|Debian|SLURM|Slurm|NVLink|jupyter-book|"
            r"ipyparallel|mpi4py|JupyterHub|JupyterLab|Hydra|hydra|MPI|Jupyter Book|PCIe|InfiniBand|"
            r"mpich|version|v")
IDENT_NOUNS = (r"[Rr]anks?|GPUs?|[Nn]odes?|[Tt]asks?|[Ww]orkers?|[Ee]ngines?|[Bb]uckets?|[Ss]tages?|"
               r"[Cc]hunks?|[Rr]ounds?|Labs?|Parts?|[Ee]xercises?|[Ss]teps?|[Cc]ells?|[Pp]anels?|"
               r"[Ll]ayers?|[Ss]lices?|[Cc]olumns?|[Rr]ows?|[Ee]q\.|Equation|Figure|Table|Section|"
               r"[Ss]eeds?|[Ii]ssues?|[Bb]its?|[Ss]hards?|[Pp]hases?|[Ss]ervers?|[Cc]ases?|"
               r"[Tt]hreads?|[Dd]evices?|[Pp]rocess(?:es)?|[Jj]obs?|[Pp]orts?|[Gg]roups?|[Cc]ores?\s(?=\d)")
IDENT = re.compile(r"(?:" + IDENT_NOUNS + r")\s+(?:\d+(?:\s*(?:,|and|or|to|…|–|-)\s*)+)*$")
CITATION = re.compile(r"(?:et al\.,?|[A-Z][a-zà-ÿ]+,?|\(|;)\s*\(?$")


@dataclass(frozen=True)
class Found:
    path: str
    line: int
    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.number!r} in: {self.context}"


# Numbers that are neither glued nor structural, each with its reason. Keep it short: a result
# never belongs here, and an input belongs here only when no code holds it.
ALLOWED: list[tuple[str, str, str]] = []


def tied(page: Page) -> list[tuple[str, str]]:
    """(phrase, expression) of each number a lab's prose restates from code (its facts' "tied")."""
    return list(facts(page.path).tied) if page.is_lab else []


def every_tied(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(lab's file, phrase, expression) of every lab's tied numbers, in reading order."""
    return [(f"labs/{lab.name}", phrase, expression) for lab in labs(root) for phrase, expression in lab.tied]


def lab_minutes(lab: str, root: Path = ROOT) -> float:
    """Minutes the lab took when its outputs were last stored (benchmarks/results/lab_times.json)."""
    times = json.loads((root / "benchmarks" / "results" / "lab_times.json").read_text())
    return times["labs"][lab] / 60


#: A lab's opening bounds its running time by its stored run's times this, rounded up to whole
#: minutes: a learner's machine may be slower than the one that stored it, and a rerun a little
#: slower keeps the bound.
RUN_HEADROOM = 1.5


def lab_run_bound(lab: str, root: Path = ROOT) -> int:
    """The whole minutes a lab's opening says it runs in, at most (RUN_HEADROOM)."""
    return math.ceil(RUN_HEADROOM * lab_minutes(lab, root))


def lab_read_minutes(lab: str, root: Path = ROOT) -> int:
    """The minutes a lab's prose takes to read (booktools.reading), rounded."""
    from booktools.reading import minutes

    return round(minutes(page_at(root / "labs" / f"{lab}.ipynb", root)))


def evaluate(expression: str):
    """Evaluate a tied expression with math, the labcode modules, dplab.models, dplab.cluster.flight,
    lab_minutes, lab_run_bound and lab_read_minutes in scope."""
    import importlib

    import dplab.cluster.flight
    import dplab.models

    scope = {"math": math, "lab_minutes": lab_minutes, "lab_run_bound": lab_run_bound,
             "lab_read_minutes": lab_read_minutes, "models": dplab.models, "flight": dplab.cluster.flight}
    for name in ("allreduce", "costmodel", "overlap", "sharding", "stragglers", "transformer"):
        scope[name] = importlib.import_module(f"labcode.{name}")
    return eval(expression, scope)  # noqa: S307 (expressions of the labs' own metadata)


def prose_lines(page: Page) -> list[Line]:
    """The lines of a page's prose that may hold numbers: no headings, no {glossary}."""
    return [line for line in page.prose if not line.heading
            and not any(f.name in NOT_PROSE for f in line.fences)]


def clean(line: str) -> str:
    """The prose of a line with roles, code, math, link targets and HTML removed (spaces kept)."""
    line = SUP.sub(lambda m: ("^" + m.group(1)).ljust(len(m.group(0))), line)  # same length
    line = SUB.sub(lambda m: " " * len(m.group(0)), line)  # an index: β<sub>2</sub>
    for rx in (ROLE, re.compile(r"`[^`]*`"), re.compile(r"\$[^$]+\$"), re.compile(r"\]\([^)]*\)"),
               re.compile(r"<[^>]+>")):
        line = rx.sub(lambda m: " " * len(m.group(0)), line)
    return line


def structural(text: str, start: int, end: int) -> bool:
    """Whether the number text[start:end] is a name, an identifier, a citation or a formula constant."""
    before, after, number = text[:start], text[end:], text[start:end]
    if re.match(r"^\s*(?:\d+\.|[-*])\s", text) and not text[: start].strip():
        return True  # a list item's own number
    if re.search(r"[A-Za-z_]-?$", before) and not re.search(VAR + r"\s?[−+·×*/^(-]$", before[-3:]):
        return True  # fp16, ZeRO-1, H100
    if re.search(r"(?:" + PRODUCTS + r")\s*[≥>=<≤]?\s*$", before):
        return True  # a version
    if re.fullmatch(r"(19|20)\d\d", number) and CITATION.search(before):
        return True
    if IDENT.search(before):
        return True
    if re.match(r"^(?:[ -]bits?|-bit|-byte)\b", after) and number in ("8", "16", "32", "64"):
        return True
    # a formula constant: joined to a variable (or a parenthesis) by an operator, or a coefficient
    if re.match(r"^\s?(?:log|ln|exp)(?![a-z])", after):
        return True  # 2 log₂ p
    if re.match(r"^(?:\^?[−-]?\d*)?(?:[A-Za-zα-ωΨΣ𝓑](?![a-z]{2})|\(|⌈|√)", after) and not re.match(
            r"^(?:" + "|".join(map(re.escape, UNITS)) + r")\b", after.lstrip()):
        return True  # 2n, 2(p, 2L, 4Ψ
    if re.match(r"^\s?" + OP + r"\s?(?:" + VAR + r"|\(|⌈|√|\d+\s?" + OP + r"\s?" + VAR + r")", after):
        return True  # 1 − q, 1/b, 2 · n
    if re.search(r"(?:" + VAR + r"|\)|⌉)\s?" + OP + r"{1,2}\s?\(?$", before):
        return True  # p − 1, s^−0.5, (k − 1)
    if re.search(r"\(\s*$", before) and re.match(r"^\s?" + OP, after):
        return True  # (1 − q)
    return False


# A lab states no run time of its own: "About N minutes" rounded from one run flips when a rerun
# crosses the rounding's edge. The landing page glues each lab's time from lab_times.json.
LAB_TIME = re.compile(r"[Aa]bout (?:\d+|one|two|three|four|five|a) minutes?\b|\d+ minutes? on an? \d+-core")
LAB_TIME_ERROR = ("a lab states no run time of its own (a rerun would flip its rounding): the landing "
                  "page glues each lab's time from benchmarks/results/lab_times.json")


def allowances(page: Page) -> list[str]:
    """The phrases whose numbers the page may state: its ALLOWED ones, and a lab's tied ones."""
    return [phrase for pattern, phrase, _ in ALLOWED if Path(page.file).match(pattern)] \
        + [phrase for phrase, _ in tied(page)]


def allowed_spans(phrases: list[str], line: str) -> list[tuple[int, int]]:
    """Where on the line numbers are allowed or tied (the spans of the matching phrases)."""
    return [m.span() for phrase in phrases for m in re.finditer(phrase, line)]


def where(page: Page, line: Line) -> str:
    """How a finding names its page: "chapters/ddp.md", or "labs/04_ddp.ipynb cell 3"."""
    return f"{page.file} cell {line.cell}" if page.is_lab else page.file


def chosen_pages(paths: list[Path] | None, root: Path) -> list[Page]:
    """The pages of `paths` (files of the book at `root`), or every page of it."""
    return [page_at(p, root) for p in paths] if paths else on_disk(root)


def typed_numbers(paths: list[Path] | None = None, root: Path = ROOT) -> list[Found]:
    """Every number in the prose of `paths` (default: every page) that is neither structural nor allowed."""
    found = []
    for page in chosen_pages(paths, root):
        phrases = allowances(page)
        for line in prose_lines(page):
            text, at = clean(line.text), where(page, line)
            if page.is_lab and LAB_TIME.search(line.text):
                found.append(Found(at, line.number, LAB_TIME.search(line.text).group(0), LAB_TIME_ERROR))
            spans = allowed_spans(phrases, line.text)
            for m in NUMBER.finditer(text):
                if structural(text, m.start(), m.end()):
                    continue
                if any(a <= m.start() and m.end() <= b for a, b in spans):
                    continue
                found.append(Found(at, line.number, m.group(1), line.text.strip()))
    return found


# A literal in the code that a comment restates in a unit: 100 MB for 100e6, 1 GiB for 2**30, 5 % for 0.05.
SCALES = (1, 1e3, 1e6, 1e9, 1e12, 2**10, 2**20, 2**30, 1e-2, 1e-3, 1e-6)


def python_tokens(source: str) -> list[tokenize.TokenInfo]:
    """The tokens of a cell, with IPython magics, shell escapes and MyST options blanked."""
    lines = ["" if re.match(r"\s*(?:%|!|:\w+:)", line) else line for line in source.split("\n")]
    try:
        return list(tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline))
    except (tokenize.TokenError, SyntaxError) as error:
        raise ValueError(f"cannot read the cell's comments: {error}") from None


def value(number: str) -> float | None:
    base, _, power = number.replace(",", "").partition("^")
    try:
        return float(base) ** float(power.replace("−", "-")) if power else float(base)
    except ValueError:
        return None


def typed_comment_numbers(paths: list[Path] | None = None, root: Path = ROOT) -> list[Found]:
    """Every number in the code comments of `paths` (default: every page) that is neither structural,
    nor a step's or man section's number, nor a literal of its own cell restated."""
    found = []
    for page in chosen_pages(paths, root):
        for cell in page.code_cells:
            tokens = python_tokens(cell.source)
            numbers = [(i, float(ast.literal_eval(t.string))) for i, t in enumerate(tokens)
                       if t.type == tokenize.NUMBER]
            literals = {x for _, x in numbers}
            at = dict(numbers)
            literals |= {at[i - 2] ** x for i, x in numbers  # 2**30
                         if i - 2 in at and tokens[i - 1].string == "**" and abs(x) < 100}
            for t in tokens:
                if t.type != tokenize.COMMENT:
                    continue
                text = clean(t.string)
                for m in NUMBER.finditer(text):
                    if structural(text, m.start(), m.end()):
                        continue
                    if re.match(r"#\s*\d+\.\s", text) and text.index(m.group(1)) == m.start():
                        continue  # a numbered step
                    if re.match(r"\(\d\)", text[m.start() - 1:m.end() + 1]) and re.search(r"\w$", text[:m.start() - 1]):
                        continue  # a man page's section: sbatch(1)
                    v = value(m.group(1))
                    if v is not None and any(math.isclose(v * s, lit, rel_tol=1e-9) for s in SCALES for lit in literals):
                        continue
                    found.append(Found(f"{page.file} {cell.where}", t.start[0], m.group(1), t.string.strip()))
    return found


def main(argv: list[str] | None = None) -> int:
    """List the typed numbers of the pages named (default: every page)."""
    targets = [Path(a).resolve() for a in (sys.argv[1:] if argv is None else argv)] or None
    result = typed_numbers(targets) + typed_comment_numbers(targets)
    for f in result:
        print(f)
    print(f"{len(result)} typed numbers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
