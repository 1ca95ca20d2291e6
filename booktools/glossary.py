"""The glossary's terms, where the book teaches each, and where the reading path first uses it.

A glossary entry ends by naming the pages that teach its term ({ref}`ch-collectives`): the first
of them, in reading order, is where the term is defined. A term's first use is the first page,
in the order of _toc.yml, whose prose a reader reads (booktools.reading: captions included,
folded boxes not) holds the term as a word, or its plural, except in a paragraph that points
ahead to where it is taught (a {ref} to a later page: "ZeRO and FSDP ({ref}`ch-sharding`)"), which
names a topic to come rather than using it. The landing page (the root of _toc.yml), which
names what the book teaches, and the Reference part (the formulas, the glossary, how the book
is checked), which is looked up, not read in order, are left out.

    python -m booktools.glossary    # each term used before the page that defines it
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from booktools.pages import ROOT, Page, page_at, toc

REFERENCE_PART = "Reference"  # _toc.yml's caption of the pages that are looked up, not read in order
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
REF = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`")


@dataclass(frozen=True)
class Term:
    name: str
    taught_at: tuple[str, ...]  # the labels its entry names, in the entry's order


@dataclass(frozen=True)
class EarlyUse:
    term: str
    used: str  # the page of the first use
    defined: str  # the first page that teaches it
    line: str  # the words around the first use


def terms(root: Path = ROOT) -> list[Term]:
    """The glossary's terms, each with the labels of the pages its entry names."""
    page = page_at(root / "chapters" / "glossary.md", root)
    [glossary] = [f for f in page.fences if f.name == "glossary"]
    found: list[tuple[str, list[str]]] = []
    for _, line in glossary.content:
        if line and not line.startswith(" "):
            found.append((line.strip(), []))
        elif found:
            found[-1][1].extend(REF.findall(line))
    return [Term(name, tuple(labels)) for name, labels in found]


def label_pages(pages: list[Page]) -> dict[str, int]:
    """Each label a page defines ((label)=), with the page's place in reading order."""
    at = {}
    for i, page in enumerate(pages):
        for cell in page.cells:
            if cell.kind == "markdown":
                for label in LABEL.findall(cell.source):
                    at.setdefault(label, i)
    return at


def pattern(term: str) -> re.Pattern:
    """The term as a word, in any case, or its plural."""
    return re.compile(rf"(?<![\w.-]){re.escape(term)}(?:s|es)?(?![\w-])", re.I)


def paragraphs(lines) -> list[str]:
    """The prose lines (booktools.pages.Line) joined into paragraphs: a blank line, a heading,
    a gap in the page's lines or another cell ends one."""
    found, last = [], None
    for line in lines:
        if not line.text.strip() or line.heading:
            last = None
            continue
        if last is not None and line.cell == last.cell and line.number == last.number + 1:
            found[-1] += "\n" + line.text
        else:
            found.append(line.text)
        last = line
    return found


def points_ahead(paragraph: str, page: int, at: dict[str, int]) -> bool:
    """Whether the paragraph refers to a page after `page` (its place in reading order)."""
    return any(at.get(label, -1) > page for label in REF.findall(paragraph))


def early_uses(root: Path = ROOT) -> list[EarlyUse]:
    """Each term whose first use on the reading path comes on a page before the one that
    defines it."""
    from booktools.reading import read_lines

    pages = [p for p in toc(root)[1:] if p.part != REFERENCE_PART]  # not the landing page
    at = label_pages(pages)
    read = [paragraphs(read_lines(page)) for page in pages]
    early = []
    for term in terms(root):
        defined = min((at[label] for label in term.taught_at if label in at), default=None)
        if defined is None:
            continue
        rx = pattern(term.name)
        for i in range(defined):
            hit = next((m for par in read[i] if (m := rx.search(par)) and not points_ahead(par, i, at)), None)
            if hit is not None:
                around = " ".join(hit.string[max(0, hit.start() - 60):hit.end() + 40].split())
                early.append(EarlyUse(term.name, pages[i].name, pages[defined].name, around))
                break
    return early


def main() -> int:
    early = early_uses()
    for use in early:
        print(f"{use.term!r} on {use.used}, defined on {use.defined}: {use.line}")
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(main())
