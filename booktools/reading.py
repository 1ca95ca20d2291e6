"""How long each page of the book takes to read: the words of its prose at WORDS_PER_MINUTE.

Prose is what a reader reads as text (booktools.pages: a chapter's Markdown or a lab's Markdown
cells, without code, display math, front matter, directive options, HTML comments,
cross-reference labels or a References section, which is looked up, not read), and here also
without a figure's caption (SKIMMED) and without what is folded by `:class: dropdown`
(solutions, "How this is checked" boxes), which a reader opens on purpose. Code and outputs are
not counted (a reader skims them at a pace no word count gives), nor is the time a lab takes to
run (the landing page gives that apart).

    python -m booktools.reading    # each page of _toc.yml in order, and the total
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from booktools.pages import Line, Page, toc

# The average silent reading rate of adults for non-fiction in English: M. Brysbaert, "How
# many words do we read per minute? A review and meta-analysis of reading rate", Journal of
# Memory and Language 109 (2019) 104047.
WORDS_PER_MINUTE = 238
SKIMMED = ("figure", "image", "glue:figure")  # a figure: looked at, its caption not read as prose
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


def read_lines(page: Page) -> list[Line]:
    """The prose a reader reads: not inside a figure, nor inside a directive of class dropdown
    (a {dropdown} directive is read, as it always was here)."""
    return [line for line in page.prose
            if not any(f.name in SKIMMED or "dropdown" in f.classes for f in line.fences)]


def prose(text: str) -> str:
    """The prose of a MyST page's text, joined by newlines."""
    return "\n".join(line.text for line in read_lines(Page("page", Path("page.md"), source=text)))


def words(page: Page) -> int:
    text = "\n".join(line.text for line in read_lines(page))
    text = re.sub(r"\$[^$\n]+\$", " x ", text)           # inline math reads as one word
    text = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", text)   # a role reads as its text
    text = re.sub(r"\]\([^)]*\)", "]", text)              # a link reads as its words
    return len(WORD.findall(text))


def minutes(page: Page) -> float:
    return words(page) / WORDS_PER_MINUTE


def main() -> int:
    pages = toc()
    for page in pages:
        print(f"{minutes(page):5.1f} min  {page.file}")
    print(f"{sum(map(minutes, pages)):5.1f} min  in all, at {WORDS_PER_MINUTE} words a minute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
