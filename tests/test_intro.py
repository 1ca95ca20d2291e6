"""The front page stays in step with the book: its lab table and its map of parts follow _toc.yml."""
import dataclasses
import importlib.util
import re
import sys

from booktools.pages import ROOT, toc

INTRO = ROOT / "intro.md"
ROW = re.compile(r"^\| \{ref\}`lab-(\d+)` \|.*\{glue:text\}`min_(\w+?)(?::[^`]*)?` \|$", re.M)


def toc_labs() -> list[str]:
    """The labs' file names (no folder, no suffix) in the order of _toc.yml."""
    return [page.path.stem for page in toc() if page.is_lab]


def table_labs(text: str) -> list[str]:
    """The labs of the intro's table, in its order, as file names; each row's label and time
    must name the same lab."""
    labs = []
    for number, name in ROW.findall(text):
        assert int(name[:2]) == int(number), f"the row of lab-{number} glues the time of {name}"
        labs.append(name)
    return labs


def make_figure():
    spec = importlib.util.spec_from_file_location("make_figure", ROOT / "img/intro/make_figure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_intro_lab_table_lists_every_lab_of_the_toc_in_order():
    assert table_labs(INTRO.read_text()) == toc_labs()


def test_lab_table_check_catches_a_missing_row():
    """The broken variant: the same table without Lab 5's row."""
    text = INTRO.read_text()
    broken = "\n".join(line for line in text.split("\n") if not line.startswith("| {ref}`lab-5`"))
    assert broken != text
    assert table_labs(broken) != toc_labs()


def test_map_of_parts_is_drawn_from_the_current_toc_and_titles():
    figure = make_figure()
    assert figure.svg() == figure.OUT.read_bytes(), (
        "img/intro/parts.svg is out of date: run .venv/bin/python img/intro/make_figure.py")


def test_map_check_catches_a_lab_moved_in_the_toc():
    """The broken variant: Lab 5 back after Lab 8, where it was before the labs were renumbered."""
    figure = make_figure()
    pages = toc()
    lab5 = next(page for page in pages if page.name == "labs/05_when_workers_fail")
    pages.remove(lab5)
    lab8 = next(i for i, page in enumerate(pages) if page.name == "labs/08_stragglers")
    pages.insert(lab8 + 1, dataclasses.replace(lab5, part=pages[lab8].part))
    assert figure.svg(pages) != figure.OUT.read_bytes()
