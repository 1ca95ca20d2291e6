"""How long each page of the book takes to read: the words of its prose at WORDS_PER_MINUTE.

Prose is what a reader reads as text: a chapter's Markdown or a lab's Markdown cells, without
code, display math, front matter, directive options, HTML comments, cross-reference labels or
a References section (looked up, not read), and without what is folded (a directive with `:class: dropdown`: solutions, "How this is
checked" boxes), which a reader opens on purpose. Code and outputs are not counted (a reader
skims them at a pace no word count gives), nor is the time a lab takes to run (the landing
page gives that apart).

    python tools/reading_time.py    # each page of _toc.yml in order, and the total
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The average silent reading rate of adults for non-fiction in English: M. Brysbaert, "How
# many words do we read per minute? A review and meta-analysis of reading rate", Journal of
# Memory and Language 109 (2019) 104047.
WORDS_PER_MINUTE = 238
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(\{[\w:-]+\})?")
CODE_DIRECTIVES = {None, "{code-cell}", "{code-block}", "{code}", "{literalinclude}", "{math}",
                   "{glue:figure}", "{figure}", "{image}", "{mermaid}", "{raw}"}
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


def toc_pages(root: Path = ROOT) -> list[Path]:
    """The book's pages in reading order: the root, then every chapter of every part."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
    return [next(p for p in (root / f"{f}.md", root / f"{f}.ipynb", root / f) if p.is_file())
            for f in files]


def prose(text: str) -> str:
    """The prose of a MyST page or of a notebook's Markdown, joined by newlines."""
    lines = text.split("\n")
    if lines and lines[0] == "---":
        lines = lines[lines.index("---", 1) + 1:]
    out, stack, in_math, in_refs = [], [], False, False
    text = re.sub(r"<!--.*?-->", "", "\n".join(lines), flags=re.S)
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and stack and m.group(1)[0] == stack[-1][0][0] and len(m.group(1)) >= len(stack[-1][0]) \
                and not m.group(2):
            stack.pop()
            continue
        if stack and stack[-1][1]:
            continue  # inside code, math, a figure's file options or a folded box
        if m:
            # a code fence, or a directive: code-like ones are skipped, prose-like ones
            # (admonitions, exercises, solutions) are read
            name = m.group(2)
            is_code = m.group(1)[0] != ":" and name in CODE_DIRECTIVES or name in CODE_DIRECTIVES - {None}
            stack.append([m.group(1), is_code])
            continue
        stripped = line.strip()
        if re.match(r"^#+\s", stripped):
            in_refs = bool(re.match(r"^#+\s+(References|Further reading|Bibliography)\b", stripped))
        if in_refs:
            continue
        if stripped.startswith("$$"):
            in_math = not (in_math or stripped.count("$$") >= 2 and len(stripped) > 2)
            continue
        if stack and re.match(r"^:class:.*\bdropdown\b", stripped):
            stack[-1][1] = True  # folded: skip the rest of the directive
            continue
        if in_math or re.match(r"^:[\w-]+:", stripped) or re.match(r"^\(?[\w-]+\)=$", stripped):
            continue
        out.append(line)
    return "\n".join(out)


def page_text(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text()


def words(path: Path) -> int:
    text = prose(page_text(path))
    text = re.sub(r"\$[^$\n]+\$", " x ", text)           # inline math reads as one word
    text = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", text)   # a role reads as its text
    text = re.sub(r"\]\([^)]*\)", "]", text)              # a link reads as its words
    return len(WORD.findall(text))


def minutes(path: Path) -> float:
    return words(path) / WORDS_PER_MINUTE


def title(path: Path) -> str:
    """The page's first level-one heading."""
    match = re.search(r"^# (.+)$", prose(page_text(path)), flags=re.M)
    return match.group(1).strip() if match else path.stem


def main() -> int:
    pages = toc_pages()
    for page in pages:
        print(f"{minutes(page):5.1f} min  {page.relative_to(ROOT)}")
    print(f"{sum(map(minutes, pages)):5.1f} min  in all, at {WORDS_PER_MINUTE} words a minute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
