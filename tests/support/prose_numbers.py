"""Find the numbers typed by hand in the book's prose: chapters, intro.md and the labs' markdown.

A number in prose is either computed (a chapter glues it: {glue:text}`name`), or it is not a
quantity at all. What is not a quantity is recognised by rule (`structural`), never by value:
  - not prose: code, math ($...$, $$, {math}), inline code, roles ({glue}, {ref}, {term}, ...),
    directive options, labels, link targets, HTML tags, headings and References sections;
  - a name: digits joined to letters (fp16, H100, ZeRO-1, x86_64), a version after a product
    name (torch 2.13, NCCL 2.10), a citation year (Goyal et al. 2017, Hockney (1994)), an
    identifier after its noun (rank 0, GPU 0, Lab 4, stage 3, exercise 2, ranks 0 and 1), a
    list item's number, a bit width (16-bit, 32 bits);
  - a constant of a formula written in prose: a number joined to a variable by an operator
    (2(p − 1)/p · n, 1 − q, s−0.5, 2n). An equals sign does not join: "p = 8" is an input
    the prose restates, and must be glued.

Everything else must be glued, tied to its constant (`TIED`, for lab markdown, which cannot glue:
JupyterLab shows a {glue} role raw), or sit on the short `ALLOWED` list with its reason. A lab
states no run time of its own ("About N minutes", `LAB_TIME`): a rerun a few seconds longer
would flip its rounding. The landing page glues each lab's time from lab_times.json.

Code comments (the labs' code cells and the chapters' code-cell blocks) follow the same rules, and
two more: a numbered step ("# 1. ...") and a man page's section (sbatch(1)) are names, and a comment
may restate a literal of its own cell ("# a 100 MB gradient" beside `100e6`), so that changing the
code flags the comment. A measurement typed into a comment (a band's record, a broken variant's
value) goes to benchmarks/results/ or to the test that shows it, and the comment points there.

Run `python tests/prose_numbers.py [PATH ...]` to list the untreated numbers of some pages.
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

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(.*)$")
CODE_INFOS = ("{code-cell}", "{code-block}", "{code}", "{literalinclude}", "{math}", "{glossary}")
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

# Lab markdown cannot glue (JupyterLab would show the role raw), so a number it restates is tied
# to the constant it restates: (lab, the phrase, an expression over labcode that must be True).
TIED: list[tuple[str, str, str]] = [
    ("labs/01_single_device.ipynb", r"784-256-128-64-10", "models.MNIST_MLP == (784, 256, 128, 64, 10)"),
    ("labs/06_transformer_ddp.ipynb", r"d = 512, w = 4000 warm-up steps and trained for 100,000 steps",
     "transformer.PAPER_D_MODEL == 512 and transformer.PAPER_WARMUP == 4000 and transformer.PAPER_STEPS == 100_000"),
    ("labs/07_sharding.ipynb", r"the 80 GB of an H100", "sharding.GPU_BYTES == 80e9"),
]


def lab_minutes(lab: str) -> float:
    """Minutes the lab took when its outputs were last stored (benchmarks/results/lab_times.json)."""
    times = json.loads((ROOT / "benchmarks" / "results" / "lab_times.json").read_text())
    return times["labs"][lab] / 60


def evaluate(expression: str):
    """Evaluate a TIED expression with math, the labcode modules and lab_minutes in scope."""
    import importlib

    import dplab.models

    scope = {"math": math, "lab_minutes": lab_minutes, "models": dplab.models}
    for name in ("allreduce", "costmodel", "overlap", "sharding", "stragglers", "transformer"):
        scope[name] = importlib.import_module(f"labcode.{name}")
    return eval(expression, scope)  # noqa: S307 (expressions written in this file)


def pages() -> list[Path]:
    return sorted((ROOT / "chapters").glob("*.md")) + [ROOT / "intro.md"] + sorted((ROOT / "labs").glob("*.ipynb"))


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every prose line of a page; a lab's markdown cells count as one text."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    lines = text.split("\n")
    out, stack, in_math, in_refs = [], [], False, False
    start = 0
    if lines and lines[0] == "---":  # front matter
        start = lines.index("---", 1) + 1
    for number, line in enumerate(lines[start:], start + 1):
        stripped = line.strip()
        m = FENCE.match(line)
        top = stack[-1] if stack else None
        if top and m and not m.group(3) and m.group(2)[0] == top[0][0] and len(m.group(2)) >= len(top[0]):
            stack.pop()
            continue
        if top and top[1]:  # inside code
            continue
        if m:
            info = m.group(3).strip()
            is_code = m.group(2)[0] != ":" and not info.startswith("{") or info.split("}")[0] + "}" in CODE_INFOS
            stack.append((m.group(2), is_code))
            continue
        if stripped.startswith("$$"):
            in_math = not (in_math or stripped.count("$$") >= 2 and len(stripped) > 2)
            continue
        if in_math:
            continue
        if re.match(r"^#+\s", stripped):
            in_refs = bool(re.match(r"^#+\s+(References|Further reading|Bibliography)", stripped))
            continue
        if in_refs or re.match(r"^:[\w-]+:", stripped) or re.match(r"^\(?[\w-]+\)=$", stripped):
            continue
        if stack and re.match(r"^[\w-]+: ", stripped):  # a directive's options in a --- block
            continue
        out.append((number, line))
    return out


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


def allowed_spans(path: Path, line: str) -> list[tuple[int, int]]:
    """Where on the line numbers are allowed or tied (the spans of the matching phrases)."""
    rel = path.relative_to(ROOT)
    spans = [m.span() for rules in (ALLOWED, TIED) for entry in rules if rel.match(entry[0])
             for m in re.finditer(entry[1], line)]
    return spans


def typed_numbers(paths: list[Path] | None = None) -> list[Found]:
    """Every number in the prose of `paths` (default: every page) that is neither structural nor allowed."""
    found = []
    for path in paths or pages():
        rel = str(path.relative_to(ROOT))
        for number, line in prose_lines(path):
            text = clean(line)
            if path.suffix == ".ipynb" and LAB_TIME.search(line):
                found.append(Found(rel, number, LAB_TIME.search(line).group(0), LAB_TIME_ERROR))
            spans = allowed_spans(path, line)
            for m in NUMBER.finditer(text):
                if structural(text, m.start(), m.end()):
                    continue
                if any(a <= m.start() and m.end() <= b for a, b in spans):
                    continue
                found.append(Found(rel, number, m.group(1), line.strip()))
    return found


# A literal in the code that a comment restates in a unit: 100 MB for 100e6, 1 GiB for 2**30, 5 % for 0.05.
SCALES = (1, 1e3, 1e6, 1e9, 1e12, 2**10, 2**20, 2**30, 1e-2, 1e-3, 1e-6)


def code_cells(path: Path) -> list[tuple[str, str]]:
    """(where, source) of every code cell of a lab, or code-cell block of a chapter."""
    text = path.read_text()
    if path.suffix == ".ipynb":
        return [(f"cell {i}", "".join(c["source"])) for i, c in enumerate(json.loads(text)["cells"])
                if c["cell_type"] == "code"]
    return [(f"line {text[:m.start()].count(chr(10)) + 1}", m.group(1))
            for m in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)]


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


def typed_comment_numbers(paths: list[Path] | None = None) -> list[Found]:
    """Every number in the code comments of `paths` (default: every page) that is neither structural,
    nor a step's or man section's number, nor a literal of its own cell restated."""
    found = []
    for path in paths or pages():
        rel = str(path.relative_to(ROOT))
        for where, source in code_cells(path):
            tokens = python_tokens(source)
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
                    found.append(Found(f"{rel} {where}", t.start[0], m.group(1), t.string.strip()))
    return found


if __name__ == "__main__":
    targets = [Path(a).resolve() for a in sys.argv[1:]] or None
    result = typed_numbers(targets) + typed_comment_numbers(targets)
    for f in result:
        print(f)
    print(f"{len(result)} typed numbers", file=sys.stderr)
