"""Every chapter's and lab's Exercises section uses sphinx-exercise's directives, and every
exercise has a solution that stays hidden until the reader opens it."""
import re
from pathlib import Path

import pytest

from booktools.pages import Line, Page, on_disk

PAGES = [page for page in on_disk() if page.name != "intro"]
ORDERED_ITEM = re.compile(r"^\d+[.)]\s")  # an old-style exercise or answer: a numbered list
HTML = re.compile(r"^<[A-Za-z/!]")  # an old-style answer: <details>


def place(line: Line) -> tuple[int, int]:
    """Where a line is on its page: (cell, line), comparable across a lab's cells."""
    return (line.cell or 0, line.number)


def exercises_section(page: Page) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Where the `## Exercises` section starts and the next `## ` heading is; None if the page
    has no such section."""
    heads = page.headings
    start = next((h for h in heads if re.fullmatch(r"## Exercises\s*", h.text)), None)
    if start is None:
        return None
    end = next((h for h in heads if place(h) > place(start) and h.text.startswith("## ")), None)
    return place(start), place(end) if end else (len(page.cells) + 1, 0)


def directives(page: Page) -> list[tuple[str, str, dict[str, str]]]:
    """(name, argument, options) of every top-level directive of the Exercises section, and
    ("list", text, {}) for an old-style numbered list, ("html", text, {}) for an HTML block."""
    first, last = exercises_section(page)
    found = [((f.cell or 0, f.first - 1), (f.name, f.argument, f.options)) for f in page.fences
             if f.depth == 0 and f.is_directive and first < (f.cell or 0, f.first - 1) < last]
    in_list, expected = False, None
    for line in page.prose:
        if line.fences or not first < place(line) < last:
            continue
        if place(line) != expected:  # something that is not top-level prose came between
            in_list = False
        expected = (line.cell or 0, line.number + 1)
        if ORDERED_ITEM.match(line.text):
            if not in_list:
                found.append((place(line), ("list", line.text, {})))
            in_list = True
        elif line.text.strip() and not line.text.startswith((" ", "\t")):
            in_list = False
            if HTML.match(line.text):
                found.append((place(line), ("html", line.text, {})))
    return [d for _, d in sorted(found, key=lambda item: item[0])]


def page_label(page: Page) -> str:
    markdown = "\n".join(c.source for c in page.cells if c.kind == "markdown")
    return re.search(r"^\(([\w-]+)\)=", markdown, re.M).group(1)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.path.name)
def test_exercises_are_directives_each_with_a_hidden_solution(page):
    name = page.path.name
    if exercises_section(page) is None:
        assert not page.is_lab, f"{name}: a lab needs an Exercises section"
        pytest.skip("no Exercises section")
    found = directives(page)
    names = [name for name, _, _ in found]
    old = [d for d in found if d[0] in ("list", "html", "dropdown", "admonition", "details")]
    assert old == [], f"{name}: old-style exercises or answers left (use exercise/solution): {old}"
    exercises = {opts.get("label", ""): i for i, (kind, _, opts) in enumerate(found)
                 if kind in ("exercise", "exercise-start")}
    assert exercises, f"{name}: the Exercises section has no {{exercise}} directive"
    prefix = page_label(page) + "-ex-"
    assert all(lab.startswith(prefix) for lab in exercises), f"{name}: label exercises {prefix}N: {list(exercises)}"
    assert len(exercises) == names.count("exercise") + names.count("exercise-start"), f"{name}: duplicate labels"
    solutions = [(i, arg, opts) for i, (kind, arg, opts) in enumerate(found) if kind in ("solution", "solution-start")]
    for label, at in exercises.items():
        mine = [(i, opts) for i, arg, opts in solutions if arg == label]
        assert len(mine) == 1, f"{name}: exercise {label} needs exactly one solution, has {len(mine)}"
        assert mine[0][0] > at, f"{name}: the solution to {label} comes before it"
        assert "dropdown" in mine[0][1].get("class", "").split(), f"{name}: solution to {label} is not hidden"
    assert {arg for _, arg, _ in solutions} <= set(exercises), f"{name}: a solution without its exercise"
    assert names.count("solution-start") == names.count("solution-end"), f"{name}: unclosed solution-start"


def test_the_check_sees_old_style_answers_and_missing_solutions():
    """The parsing above catches what it is there to catch."""
    def page(section: str) -> Page:
        text = "(lab-9)=\n# Lab 9\n\n## Exercises\n" + section + "\n## References\n\n1. A paper.\n"
        return Page("lab-9", Path("lab-9.md"), source=text)

    old = "\n1. A question?\n\n:::{dropdown} Answers\n1. An answer.\n:::\n"
    assert [n for n, _, _ in directives(page(old))] == ["list", "dropdown"]
    new = ":::{exercise}\n:label: lab-9-ex-1\n\nQ?\n:::\n\n:::{solution} lab-9-ex-1\n:class: dropdown\n\nA.\n:::\n"
    assert directives(page(new)) == [("exercise", "", {"label": "lab-9-ex-1"}),
                                     ("solution", "lab-9-ex-1", {"class": "dropdown"})]
    assert page_label(page(new)) == "lab-9"
    assert exercises_section(Page("x", Path("x.md"), source="# X\n\n## Steps\n")) is None
