"""The front page stays in step with the book: its lab table and its map of parts follow _toc.yml."""
import dataclasses
import importlib.util
import json
import re
import sys

import pytest

import booktools.labs
from booktools.labs import labs, landing_table
from booktools.pages import ROOT, toc

INTRO = ROOT / "intro.md"
ROW = re.compile(r"^\| \{ref\}`lab-(\d+)` \| (.+) \| (\d+\.\d) \|$", re.M)
TIMES = json.loads((ROOT / "benchmarks/results/lab_times.json").read_text())["labs"]


def toc_labs() -> list[int]:
    """The labs' numbers in the order of _toc.yml."""
    return [int(page.path.stem[:2]) for page in toc() if page.is_lab]


def make_figure():
    spec = importlib.util.spec_from_file_location("make_figure", ROOT / "img/intro/make_figure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_intro_lab_table_lists_every_lab_of_the_toc_in_order():
    """The landing page glues its lab table (booktools.labs.landing_table): a row per lab of
    _toc.yml, in its order, with what the lab proves and its time."""
    assert "```{glue:md} lab_table\n:format: myst\n```" in INTRO.read_text()
    rows = ROW.findall(landing_table(TIMES))
    assert [int(number) for number, _, _ in rows] == toc_labs()
    assert all(len(proves.split()) >= 8 for _, proves, _ in rows), rows


def test_a_lab_without_what_it_proves_or_a_time_is_refused(monkeypatch):
    """The broken variants: a lab whose metadata says nothing of what it proves, and one that
    lab_times.json has no time for."""
    every = labs()
    monkeypatch.setattr(booktools.labs, "labs", lambda root=ROOT: [*every[:5], dataclasses.replace(every[5], proves="")])
    with pytest.raises(ValueError, match=f"{every[5].name}: no \"proves\""):
        landing_table(TIMES)
    monkeypatch.setattr(booktools.labs, "labs", lambda root=ROOT: every)
    with pytest.raises(ValueError, match=f"{every[5].name}: no time"):
        landing_table({k: v for k, v in TIMES.items() if k != every[5].stem})


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
