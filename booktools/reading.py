"""How long each page of the book takes to read: the words of its prose at WORDS_PER_MINUTE.

Prose is what a reader reads as text (booktools.pages: a chapter's Markdown or a lab's Markdown
cells, without code, display math, front matter, directive options, HTML comments,
cross-reference labels or a References section, which is looked up, not read). A figure's
caption is read, and counted. What is folded by `:class: dropdown` (solutions, "How this is
checked" boxes) is not: a reader opens it on purpose. Code and outputs are not counted (a reader
skims them at a pace no word count gives), nor is the time a lab takes to run (the landing page
gives that apart).

    python -m booktools.reading    # each page of _toc.yml in order, and the total
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from booktools.pages import Line, Page, toc

# The book's budgets are counted at 200 words a minute: a newcomer reads a technical text more
# slowly than the average silent rate of adults for non-fiction (238 words a minute: M.
# Brysbaert, "How many words do we read per minute? A review and meta-analysis of reading rate",
# Journal of Memory and Language 109 (2019) 104047).
WORDS_PER_MINUTE = 200
PAGE_LIMIT_MIN = 12  # no page longer
BOOK_LIMIT_MIN = 200  # the whole book, every page of _toc.yml: a weekend
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


def read_lines(page: Page) -> list[Line]:
    """The prose a reader reads, captions included: not inside a directive of class dropdown
    (a {dropdown} directive is read, as it always was here)."""
    return [line for line in page.prose if not any("dropdown" in f.classes for f in line.fences)]


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
        over = "   (over the page's limit)" if minutes(page) > PAGE_LIMIT_MIN else ""
        print(f"{minutes(page):5.1f} min  {page.file}{over}")
    total = sum(map(minutes, pages))
    print(f"{total:5.1f} min  in all, at {WORDS_PER_MINUTE} words a minute (limits: {PAGE_LIMIT_MIN} a page, "
          f"{BOOK_LIMIT_MIN} the book)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
