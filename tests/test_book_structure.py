"""The book's own rules, checked: toc, lab skeleton, stored outputs, no machine paths."""
import re
import subprocess
import sys

import pytest
import yaml

from booktools.pages import ROOT, Page, on_disk, toc

LABS = [page for page in on_disk() if page.is_lab]
SKELETON = ["Goal", "Prerequisites", "Set-up", "Check", "Takeaways", "Exercises"]
MACHINE_PATH = re.compile(r"/(work|tmp|root|home)/")


def markdown(page: Page) -> str:
    """A lab's markdown cells, one after the other."""
    return "\n".join(c.source for c in page.cells if c.kind == "markdown")


def test_toc_lists_only_pages_that_exist():
    for page in toc():
        assert page.path.is_file(), f"_toc.yml lists missing page {page.name}"


def test_every_lab_and_chapter_is_in_the_toc():
    listed = {page.name for page in toc()}
    assert [page.name for page in on_disk() if page.name not in listed] == []


def test_labs_are_numbered_in_the_order_a_reader_meets_them():
    """The toc lists Lab 0, 1, 2, ... in turn, and each lab's file, label and title carry its number."""
    labs = [page for page in toc() if page.is_lab]
    numbers = [int(page.path.name[:2]) for page in labs]
    assert numbers == list(range(len(labs))), f"labs out of order in _toc.yml: {[p.name for p in labs]}"
    for page, k in zip(labs, numbers):
        first = page.cells[0].source
        assert first.startswith(f"(lab-{k})=\n# Lab {k}:"), f"{page.name}: label and title should say Lab {k}"


def test_environment_yml_takes_pip_packages_from_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r requirements.txt" in pip


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_lab_follows_the_skeleton(page):
    text = markdown(page)
    missing = [s for s in SKELETON if not re.search(rf"(^#+ .*{s}|\*\*{s}[.:*])", text, re.M)]
    assert missing == [], f"{page.path.name} lacks skeleton sections {missing}"
    assert re.match(r"\(lab-\d+\)=", page.cells[0].source), "first cell should carry the lab's label"


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_lab_is_stored_with_outputs_and_without_machine_paths(page):
    code = page.code_cells
    assert code and all(c.execution_count is not None for c in code), "execute the lab and store it (make labs)"
    assert any(c.outputs for c in code)
    assert not MACHINE_PATH.search(page.text), f"{page.path.name} contains a machine path"


#: What a cell whose output nbval does not compare may do instead of checking: show a result the
#: learner reads. A figure, a takeaway, or a measurement printed as one (dplab.timing.measured
#: keeps it; issue 61: a timing that a shared machine moves past any band that would still catch
#: its mistake is printed, not asserted, and an assert that cannot fail is a defect).
REPORTS = ("plt.show(", "takeaway(", "measured(", "machine()")


def _code_only(source: str) -> str:
    """The cell's source less its comment lines: a comment that says "asserts" asserts nothing."""
    return "\n".join(line.split("#", 1)[0] if line.lstrip().startswith("#") else line
                     for line in source.split("\n"))


#: A check: an assert statement, or a call of one of a lab's check functions (check_overlap,
#: check_profile: each asserts). Not the word inside a string: a print of "(asserted)" checks nothing.
CHECKS = re.compile(r"\bassert\b|\bcheck_\w+\(")


def silent_ignored_cells(code) -> list[str]:
    """The output-ignored cells (nbval-ignore-output) that neither check nor report: no check
    (CHECKS) and none of REPORTS in the cell, in the rest of the run of output-ignored cells it
    belongs to, or a check in the first compared cell after that run. Comment lines do not
    count. Each cell's first lines."""
    ignored = ["nbval-ignore-output" in c.tags for c in code]
    sources = [_code_only(c.source) for c in code]
    silent = []
    for i in range(len(code)):
        if not ignored[i]:
            continue
        j = i
        while not (CHECKS.search(sources[j]) or any(r in sources[j] for r in REPORTS)) \
                and j + 1 < len(code) and ignored[j]:
            j += 1
        if not (CHECKS.search(sources[j]) or (ignored[j] and any(r in sources[j] for r in REPORTS))):
            silent.append(code[i].source[:200])
    return silent


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_cells_whose_output_is_ignored_check_or_report(page):
    """A cell whose output is not compared checks something or reports a result; never skipped."""
    assert not [c for c in page.code_cells if "nbval-skip" in c.tags], f"{page.path.name}: a skipped cell"
    silent = silent_ignored_cells(page.code_cells)
    assert not silent, f"{page.path.name}: output-ignored cells that check nothing:\n" + "\n--\n".join(silent)


def test_an_ignored_cell_that_neither_checks_nor_reports_is_caught():
    """The rule above, on its broken variant: a timing cell whose assert was removed and that
    reports nothing is caught; with an assert after it, or a takeaway in it, it passes."""
    from types import SimpleNamespace as Cell

    ignored = ["nbval-ignore-output"]
    timing = Cell(source="t = time_it()\nprint(t)", tags=ignored)
    assert silent_ignored_cells([timing, Cell(source="x = 1", tags=[])]) == [timing.source]
    assert silent_ignored_cells([timing, Cell(source="assert t < 1", tags=[])]) == []
    assert silent_ignored_cells([Cell(source="takeaway(f'{t}')", tags=ignored)]) == []
    # a timing cell before the cell that plots it reports with it; a comment checks nothing
    plotted = Cell(source="plt.bar(t)\nplt.show()", tags=ignored)
    assert silent_ignored_cells([timing, plotted]) == []
    said = Cell(source="# the check below asserts what holds anywhere", tags=ignored)
    assert silent_ignored_cells([timing, said, Cell(source="x = 1", tags=[])]) == [timing.source, said.source]
    # a check function counts; the word in a printed string does not
    assert silent_ignored_cells([Cell(source="check_profile(t)", tags=ignored)]) == []
    printed = Cell(source='print("agrees (asserted)")', tags=[])
    assert silent_ignored_cells([timing, printed]) == [timing.source]


def test_a_command_run_beside_the_next_is_shown_but_not_added(monkeypatch, tmp_path):
    from booktools import readme

    (tmp_path / "commands.txt").write_text(
        "$ python -m booktools.commands ...   # 2026-12-06 15:00 UTC, clean clone of abc1234\n"
        "machine: a box\n"
        "make torch-releases TORCH=2.8.0 &     150 s\n"
        "make test ON=torch=2.8.0    1000 s\n"
        "make test-hub         60 s\n")
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    table = readme.commands_table()
    assert "| `make torch-releases TORCH=2.8.0`, beside the next | 2 min 30 s |" in table
    assert "| all of them | 17 min 40 s | |" in table  # 1000 + 60: the row beside is in the next


def test_readme_timing_tables_are_the_saved_results():
    """README.md's timing tables are written from benchmarks/results/, not typed by hand."""
    out = subprocess.run([sys.executable, "-m", "booktools.readme", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_lab_asks_for_a_prediction_before_it_measures(page):
    """Issue 34: before each Measure section the learner writes down a prediction: a markdown
    cell with "Predict first." just before the section's heading or between it and its first
    code cell."""
    cells = page.cells
    for i, cell in enumerate(cells):
        if cell.kind == "markdown" and re.search(r"^#+ .*Measure", cell.source, re.M):
            j = next((k for k in range(i + 1, len(cells)) if cells[k].kind == "code"), len(cells))
            assert any("**Predict first.**" in cells[k].source for k in range(i - 1, j)), (
                f"{page.path.name}: no 'Predict first.' prompt before the Measure section in cell {i}")


# The documents the book grew from are not the reader's: a page that calls something "the seed
# example" or "our seed material" points at text the reader never saw. (A random seed is fine.)
SOURCE_MATERIAL = re.compile(
    r"\b(?:our|the other)\s+seed\b|\bthe\s+seed's\b"
    r"|\bseed(?:'s)?\s+(?:material|example|script|chart|version|documents?)\b", re.I)


def source_material_mentions(text: str) -> list[str]:
    return [m.group(0) for m in SOURCE_MATERIAL.finditer(text)]


def test_no_page_speaks_of_the_material_the_book_grew_from():
    found = []
    for page in on_disk():
        text = markdown(page) if page.is_lab else page.text
        found += [f"{page.file}: {hit!r}" for hit in source_material_mentions(text)]
    assert not found, "pages that mention the book's source material:\n" + "\n".join(found)


def test_the_source_material_scan_catches_what_it_was_written_for():
    for text in ("Change the seed example to MAX", "### The seed's script, corrected",
                 "the bug in the SLURM script of our seed material", "The other seed example starts"):
        assert source_material_mentions(text), text
    for text in ("the seed never changes", "any seed's correct ratio", "seed=0", "a random seed"):
        assert not source_material_mentions(text), text
