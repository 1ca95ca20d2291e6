"""The built book as a reader meets it (issue 34), read from _build/html without a browser.

- No code cell the reader sees has more than WALL_LINES lines: a cell whose input is folded
  (tag hide-input: a <details> around it) or removed does not count.
- No lab shows more than LAB_CODE_LINES lines of code in all, blank lines included: what stays
  unfolded is the code the lab teaches and short calls to its checks (issue 60).
- Every chapter shows a figure before its first display equation, and opens with a
  "You will be able to" box.
- Every plot a lab draws sits in a figure with a caption.
- The text a learner sees (prose, code and its comments, outputs; folded boxes, folded cells
  and dropdowns aside) speaks the lesson's words, not the book's checking (MAINTAINER_TALK, issue
  60): no page holds any. The closing page, "How this book is checked", is the checking path
  and is left out.
"""
import copy
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from booktools.pages import LAB_CODE_LINES, WALL_LINES

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
#: The closing page, "How this book is checked", is the checking path itself, off the reading path.
CHECKING = "checked"
REFERENCE = {"formulas", "glossary", CHECKING}  # the Reference part: looked up, not read in order


def pages(folder: str) -> list[Path]:
    return sorted((HTML / folder).glob("*.html")) or [HTML / folder / "missing.html"]


def soup(page: Path) -> BeautifulSoup:
    if not page.is_file():
        pytest.fail(f"no built book in {HTML}: run `make test-book` first", pytrace=False)
    return BeautifulSoup(page.read_text(), "html.parser")


def shown_code(doc: BeautifulSoup) -> list[list[str]]:
    """The lines of each code cell a reader sees unfolded."""
    cells = []
    for cell in doc.select("div.cell_input"):
        if cell.find_parent("details"):
            continue  # folded: the reader opens it on purpose
        pre = cell.find("pre")
        cells.append(pre.get_text().rstrip("\n").split("\n") if pre else [])
    return cells


def walls(doc: BeautifulSoup) -> list[str]:
    """The code cells a reader sees unfolded that are longer than WALL_LINES lines."""
    return [f"{len(lines)} lines: {lines[0][:60]!r}" for lines in shown_code(doc) if len(lines) > WALL_LINES]


def figure_before_math(doc: BeautifulSoup) -> str | None:
    """What is wrong with the page's first figure and first display equation, if anything."""
    article = doc.select_one("article") or doc
    first_math = article.select_one("div.math")
    figures = article.select("figure, img")
    if not figures:
        return "no figure"
    if first_math is None:
        return None
    order = {id(e): i for i, e in enumerate(article.find_all(True))}
    if order[id(figures[0])] > order[id(first_math)]:
        return f"the first display equation comes before the first figure: {first_math.get_text()[:60]!r}"
    return None


def opens_with_outcomes(doc: BeautifulSoup) -> bool:
    """A "You will be able to" admonition before the page's first second-level section."""
    article = doc.select_one("article") or doc
    for el in article.find_all(["h2", "div"]):
        if el.name == "h2":
            return False
        if "admonition" in (el.get("class") or []) and re.search(
                r"You will be able to", el.get_text()):
            return True
    return False


#: Words of the book's checking rather than of its lessons: what a learner should not meet
#: unfolded. Each a regular expression.
MAINTAINER_TALK = {
    "CI": r"\bCI\b",
    "nbval": r"\bnbval\b",
    "stored outputs": r"\bstored outputs?\b",
    "asserted": r"\b(?:not )?asserted\b",
    "not compared": r"\bnot compared\b",
    "a make target of the checks": r"\bmake (?:test|bench)-[-\w]+",  # make test, make bench: a learner's
    "an export marker": r"#\| export",
    "a path of the repository's checks": r"\b(?:benchmarks/results|tests/\w|tolerances\.txt)",
    "the build machine": r"\b(?:the box that builds|the machine that stored|build machine)\b",
    "a grading marker": r"BEGIN SOLUTION|END SOLUTION|### BEGIN|grade_id",
}
#: What a learner does not see unless they open it: <details> (folded cells, their outputs),
#: dropdown admonitions and solutions, and a folded cell's input.
FOLDED = "details, div.dropdown, div.toggle-hidden, div.tag_hide-cell, div.tag_hide-input div.cell_input, script, style"


def visible_text(doc: BeautifulSoup) -> str:
    """The page's article less what is folded."""
    article = copy.copy(doc.select_one("article") or doc)
    for el in article.select(FOLDED):
        el.decompose()
    return article.get_text(" ")


def maintainer_talk(text: str) -> dict[str, list[str]]:
    """Each word of MAINTAINER_TALK found in `text`, with the words around each place."""
    found = {}
    for name, rx in MAINTAINER_TALK.items():
        places = [" ".join(text[max(0, m.start() - 50):m.end() + 30].split()) for m in re.finditer(rx, text)]
        if places:
            found[name] = places
    return found


def uncaptioned_plots(doc: BeautifulSoup) -> list[str]:
    """Images in cell outputs that are not in a figure with a caption."""
    bad = []
    for img in doc.select("div.cell_output img"):
        figure = img.find_parent("figure")
        caption = figure.find("figcaption") if figure else None
        if not caption or not caption.get_text(strip=True):
            bad.append(img.get("src", "?")[:60])
    return bad


@pytest.mark.parametrize("page", pages("chapters") + pages("labs") + [HTML / "intro.html"],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_visible_code_cell_is_a_wall(page):
    assert walls(soup(page)) == [], f"{page.name}: code cells longer than {WALL_LINES} lines shown unfolded"


@pytest.mark.parametrize("page", pages("labs"), ids=lambda p: p.stem)
def test_no_lab_shows_more_than_its_share_of_code(page):
    shown = sum(map(len, shown_code(soup(page))))
    assert shown <= LAB_CODE_LINES, (f"{page.name} shows {shown} lines of code unfolded (at most "
                                     f"{LAB_CODE_LINES}): fold the checks, harnesses and plotting "
                                     "(tag hide-input) or move them into dplab")


@pytest.mark.parametrize("page", [p for p in pages("chapters") if p.stem not in REFERENCE],
                         ids=lambda p: p.stem)
def test_chapter_shows_a_figure_before_its_first_equation_and_opens_with_its_outcomes(page):
    doc = soup(page)
    assert figure_before_math(doc) is None, f"{page.name}: {figure_before_math(doc)}"
    assert opens_with_outcomes(doc), f"{page.name}: no 'You will be able to' box before its first section"


@pytest.mark.parametrize("page", pages("labs"), ids=lambda p: p.stem)
def test_every_lab_plot_has_a_caption(page):
    assert uncaptioned_plots(soup(page)) == [], f"{page.name}: plots without a caption"


@pytest.mark.parametrize("page", [p for p in pages("chapters") if p.stem != CHECKING] + pages("labs")
                         + [HTML / "intro.html"], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_learner_meets_the_lessons_words_not_the_checks(page):
    found = maintainer_talk(visible_text(soup(page)))
    name = f"{page.parent.name}/{page.stem}" if page.parent != HTML else page.stem
    said = "\n".join(f"  {word}: ... {place} ..." for word, places in found.items() for place in places)
    assert not found, f"{name}: maintainer talk a learner meets:\n{said}"


def test_the_rules_catch_what_they_look_for():
    wall = "\n".join(f"x = {i}" for i in range(WALL_LINES + 1))
    bad = BeautifulSoup(f"""<article><h1>T</h1><div class="math">$$x$$</div><figure><img src="a.png"></figure>
        <h2>S</h2><div class="admonition"><p>You will be able to</p></div>
        <div class="cell"><div class="cell_input"><pre>{wall}</pre></div>
        <div class="cell_output"><img src="plot.png"></div></div></article>""", "html.parser")
    assert walls(bad) and figure_before_math(bad) and not opens_with_outcomes(bad)
    assert sum(map(len, shown_code(bad))) == WALL_LINES + 1
    assert uncaptioned_plots(bad) == ["plot.png"]
    good = BeautifulSoup(f"""<article><h1>T</h1><div class="admonition tip"><p>You will be able to</p></div>
        <figure><img src="a.png"></figure><div class="math">$$x$$</div><h2>S</h2>
        <div class="cell"><details><div class="cell_input"><pre>{wall}</pre></div></details>
        <div class="cell_output"><figure><img src="plot.png"><figcaption>Notice.</figcaption></figure>
        </div></div></article>""", "html.parser")
    assert not walls(good) and figure_before_math(good) is None and opens_with_outcomes(good)
    assert shown_code(good) == []
    assert uncaptioned_plots(good) == []
    talk = BeautifulSoup("""<article><p>This cell's output is not compared by nbval in CI.</p>
        <div class="cell"><div class="cell_input"><pre>#| export: formulas</pre></div></div>
        <div class="dropdown admonition"><p>How this is checked: make test-load, asserted.</p></div>
        <details><pre>benchmarks/results/test_load.txt</pre></details></article>""", "html.parser")
    assert set(maintainer_talk(visible_text(talk))) == {"not compared", "nbval", "CI", "an export marker"}
