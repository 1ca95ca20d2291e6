"""Every chapter's and lab's Exercises section uses sphinx-exercise's directives, and every
exercise has a solution that stays hidden until the reader opens it."""
import re
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "chapters").glob("*.md")) + sorted((ROOT / "labs").glob("*.ipynb"))
MD = MarkdownIt("commonmark").use(colon_fence_plugin)
HEADING = re.compile(r"^## ", re.M)


def page_text(path: Path) -> str:
    """The page's Markdown: a chapter's source, or a lab's markdown cells."""
    if path.suffix == ".md":
        return path.read_text()
    nb = nbformat.read(path, as_version=4)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def exercises_section(text: str) -> str | None:
    """From the `## Exercises` heading to the next `## ` heading; None if the page has none."""
    start = re.search(r"^## Exercises\s*$", text, re.M)
    if not start:
        return None
    end = HEADING.search(text, start.end())
    return text[start.end():end.start() if end else len(text)]


def directives(section: str) -> list[tuple[str, str, dict[str, str]]]:
    """(name, argument, options) of every top-level directive, and ("list", "", {}) for a list."""
    found = []
    for tok in MD.parse(section):
        if tok.type in ("fence", "colon_fence") and tok.info.startswith("{"):
            name, _, arg = tok.info[1:].partition("}")
            options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", tok.content.split("\n\n")[0], re.M))
            found.append((name, arg.strip(), options))
        elif tok.type in ("ordered_list_open", "html_block") and tok.level == 0:
            found.append(("list" if tok.type == "ordered_list_open" else "html", tok.content, {}))
    return found


def page_label(text: str) -> str:
    return re.search(r"^\(([\w-]+)\)=", text, re.M).group(1)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_exercises_are_directives_each_with_a_hidden_solution(path):
    text = page_text(path)
    section = exercises_section(text)
    if section is None:
        assert path.suffix == ".md", f"{path.name}: a lab needs an Exercises section"
        pytest.skip("no Exercises section")
    found = directives(section)
    names = [name for name, _, _ in found]
    old = [d for d in found if d[0] in ("list", "html", "dropdown", "admonition", "details")]
    assert old == [], f"{path.name}: old-style exercises or answers left (use exercise/solution): {old}"
    exercises = {opts.get("label", ""): i for i, (name, _, opts) in enumerate(found)
                 if name in ("exercise", "exercise-start")}
    assert exercises, f"{path.name}: the Exercises section has no {{exercise}} directive"
    prefix = page_label(text) + "-ex-"
    assert all(lab.startswith(prefix) for lab in exercises), f"{path.name}: label exercises {prefix}N: {list(exercises)}"
    assert len(exercises) == names.count("exercise") + names.count("exercise-start"), f"{path.name}: duplicate labels"
    solutions = [(i, arg, opts) for i, (name, arg, opts) in enumerate(found) if name in ("solution", "solution-start")]
    for label, at in exercises.items():
        mine = [(i, opts) for i, arg, opts in solutions if arg == label]
        assert len(mine) == 1, f"{path.name}: exercise {label} needs exactly one solution, has {len(mine)}"
        assert mine[0][0] > at, f"{path.name}: the solution to {label} comes before it"
        assert "dropdown" in mine[0][1].get("class", "").split(), f"{path.name}: solution to {label} is not hidden"
    assert {arg for _, arg, _ in solutions} <= set(exercises), f"{path.name}: a solution without its exercise"
    assert names.count("solution-start") == names.count("solution-end"), f"{path.name}: unclosed solution-start"

def test_the_check_sees_old_style_answers_and_missing_solutions():
    """The parsing above catches what it is there to catch."""
    old = "\n1. A question?\n\n:::{dropdown} Answers\n1. An answer.\n:::\n"
    assert [n for n, _, _ in directives(old)] == ["list", "dropdown"]
    new = ":::{exercise}\n:label: lab-9-ex-1\n\nQ?\n:::\n\n:::{solution} lab-9-ex-1\n:class: dropdown\n\nA.\n:::\n"
    assert directives(new) == [("exercise", "", {"label": "lab-9-ex-1"}),
                               ("solution", "lab-9-ex-1", {"class": "dropdown"})]
    text = "(lab-9)=\n# Lab 9\n\n## Exercises\n" + new + "\n## References\n\n1. A paper.\n"
    assert exercises_section(text).strip() == new.strip() and page_label(text) == "lab-9"
