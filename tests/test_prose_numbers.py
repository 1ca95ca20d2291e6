"""No number typed by hand in the book's prose: each is glued, tied to its constant, or allowed with a reason.

The rules are in booktools/numbers.py; `python -m booktools.numbers PAGE` lists a page's numbers.
"""
import re
from pathlib import Path

import pytest

from booktools import numbers as pn
from booktools.pages import on_disk


def test_every_number_in_prose_is_glued_tied_or_allowed():
    found = pn.typed_numbers()
    assert found == [], "numbers typed by hand (glue them, or see booktools/numbers.py):\n" + "\n".join(
        map(str, found))


@pytest.mark.parametrize("rules", [pn.ALLOWED, pn.every_tied()], ids=["ALLOWED", "TIED"])
def test_every_allowance_is_used_and_says_why(rules):
    for entry in rules:
        page, phrase, why = entry
        pages = [p for p in on_disk() if Path(p.file).match(page)]
        assert pages, f"{page}: no such page"
        used = any(re.search(phrase, line.text) for p in pages for line in pn.prose_lines(p))
        assert used, f"{page}: {phrase!r} matches no prose line any more: remove it"
        assert why.strip(), f"{page}: {phrase!r} has no reason"


@pytest.mark.parametrize("page, phrase, expression", pn.every_tied())
def test_a_tied_number_equals_its_constant(page, phrase, expression):
    assert pn.evaluate(expression) is True, f"{page}: {phrase!r} no longer matches {expression}"


def test_a_lab_ties_a_number_in_its_own_metadata(tmp_path):
    """The broken variant of a tie: the same phrase in a lab without its "tied" entry is flagged."""
    said = "It uses the 80 GB of an H100."
    assert scan_lab(tmp_path, said, 60) == ["80"]
    assert scan_lab(tmp_path, said, 60, tied=[{"phrase": "the 80 GB of an H100", "holds": "True"}]) == []


def numbers_under(root: Path, scan, path: Path) -> list[str]:
    """The numbers `scan` (typed_numbers or typed_comment_numbers) finds in `path`, a page of
    the book at `root`."""
    return [f.number for f in scan([path], root)]


def scan(tmp_path: Path, prose: str) -> list[str]:
    page = tmp_path / "chapters" / "page.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("---\nkernelspec: {}\n---\n\n(ch-x)=\n# Title 3\n\n" + prose + "\n")
    return numbers_under(tmp_path, pn.typed_numbers, page)


@pytest.mark.parametrize("prose, flagged", [
    # results and restated inputs: caught
    ("A parameter server would receive 14 GB in fp16.", ["14"]),
    ("The 7-billion-parameter model at p = 8 and p = 64.", ["7", "8", "64"]),
    ("bf16 autocast was about 1.3 times slower than fp32.", ["1.3"]),
    ("it comes out at about 1, and the scale is 2<sup>16</sup>; noise ~10⁻⁶.", ["1", "2^16", "10⁻⁶"]),
    ("Take 63 workers and 10,000 updates.", ["63", "10,000"]),
    # computed, names, formulas and code: not numbers typed by hand
    ("It takes {glue:text}`t:.2f` s, see {ref}`lab-4` and {numref}`fig-3`.", []),
    ("Each rank sends 2(p − 1)/p · n bytes, 1 − (1 − q)^p of the time, in 2 log₂ p rounds.", []),
    ("fp16, bf16, H100, ZeRO-1 and torch 2.13 (Goyal et al. 2017; Hockney (1994)).", []),
    ("Rank 0 and ranks 0 and 1 on GPU 0, in Lab 4, exercise 2, stage 3; 16-bit values.", []),
    ("The math $p = 8$ and the code `x = 14` are not prose.", []),
    ("Adam's β<sub>2</sub> and B<sub>noise</sub> are names.", []),
    ("```{code-cell} ipython3\nx = 14\n```\n\n$$\nt = 2(p-1)\n$$", []),
    ("## References\n\n1. Someone, 2019. 14 pages.", []),
])
def test_the_scan_flags_typed_numbers_and_nothing_else(tmp_path, prose, flagged):
    assert scan(tmp_path, prose) == flagged


def scan_lab(tmp_path: Path, markdown: str, seconds: float, tied: list | None = None) -> list[str]:
    import json

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown),
                                         nbformat.v4.new_code_cell("x = 41")],
                                  metadata={"dplab": {"tied": tied}} if tied else {})
    lab = tmp_path / "labs" / "09_lab.ipynb"
    lab.parent.mkdir(exist_ok=True)
    nbformat.write(nb, lab)
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "lab_times.json").write_text(json.dumps(
        {"machine": "2-core AMD EPYC, Linux", "labs": {"09_lab": seconds}}))
    return numbers_under(tmp_path, pn.typed_numbers, lab)


def test_a_lab_markdown_cell_is_scanned(tmp_path):
    assert scan_lab(tmp_path, "On the box it took 41 MB.", 60) == ["41"]


@pytest.mark.parametrize("said", [
    "About 3 minutes on a 2-core laptop.", "About one minute on a 2-core laptop.",
    "The lab takes about a minute.", "It ran 2 minutes on a 4-core box.",
])
def test_a_lab_states_no_run_time_of_its_own(tmp_path, said):
    """The rounding of one run flips when a rerun crosses its edge: the landing page glues it."""
    assert scan_lab(tmp_path, said, 60) != []


def test_a_lab_may_point_to_the_landing_pages_time(tmp_path):
    assert scan_lab(tmp_path, "The landing page's table says how long it ran.", 60) == []


def test_every_number_in_a_code_comment_is_structural_or_restates_its_cell():
    found = pn.typed_comment_numbers()
    assert found == [], ("numbers typed by hand into code comments (point to benchmarks/results/ or the "
                         "test that measured them; see booktools/numbers.py):\n" + "\n".join(map(str, found)))


def scan_comments(tmp_path: Path, code: str) -> list[str]:
    import nbformat

    lab = tmp_path / "labs" / "09_lab.ipynb"
    lab.parent.mkdir(exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), lab)
    return numbers_under(tmp_path, pn.typed_comment_numbers, lab)


@pytest.mark.parametrize("code, flagged", [
    # a measurement typed into a comment: caught
    ("TOL = 0.15  # the ratios stayed within 0.08 of 1 in ten runs", ["0.08", "1"]),
    ("%%px\nx = 1  # on one H200 the buckets made it 1.17 x slower", ["1.17"]),
    # a literal of the cell restated, a step's number, a man section, a version, code: not typed
    ("GRAD = 100e6  # bytes: a 100 MB gradient\nN = 2**30  # a 1 GiB buffer", []),
    ("# 1. Count the ranks.\n# 2. Sum them.\nx = '# 14 in a string'", []),
    ("# the batch step runs as task 0 (sbatch(1), OUTPUT) on torch 2.13", []),
])
def test_the_comment_scan_flags_typed_numbers_and_nothing_else(tmp_path, code, flagged):
    assert scan_comments(tmp_path, code) == flagged


def test_every_lab_opens_with_its_reading_and_running_time():
    """Issue 60: a lab's opening says how long it takes to read and to run, tied to
    booktools.reading and lab_times.json (lab_read_minutes, lab_run_bound), so a page that grows
    or a lab that slows past its bound fails test_a_tied_number_equals_its_constant."""
    from booktools.labs import labs
    from booktools.pages import page_at

    for lab in labs():
        opening = next((line.text for line in page_at(lab.path).prose if "minutes to read" in line.text), "")
        m = re.search(r"(\d+) minutes to read(?:,| and) under (\d+) minutes? to run", opening)
        assert m, f"{lab.name}: its opening does not say how long it takes to read and to run"
        holds = [h for phrase, h in lab.tied if re.search(phrase, opening)]
        assert holds == [f"lab_read_minutes({lab.stem!r}) == {m[1]} and lab_run_bound({lab.stem!r}) == {m[2]}"], \
            f"{lab.name}: its times are not tied to lab_read_minutes and lab_run_bound"


def test_a_lab_whose_opening_times_are_wrong_fails_its_tie():
    """The broken variant: a reading time one minute off, and a bound a run outgrew."""
    from booktools.labs import labs

    lab = labs()[4]
    read, bound = pn.lab_read_minutes(lab.stem), pn.lab_run_bound(lab.stem)
    assert pn.evaluate(f"lab_read_minutes({lab.stem!r}) == {read}") is True
    assert pn.evaluate(f"lab_read_minutes({lab.stem!r}) == {read + 1}") is False
    assert pn.evaluate(f"lab_run_bound({lab.stem!r}) == {bound - 1}") is False
