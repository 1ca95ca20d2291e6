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


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.path.name)
def test_cells_whose_output_is_ignored_still_assert(page):
    """A timing cell's output is not compared, so an assert must follow in it, in the run of
    output-ignored cells it belongs to, or in the first compared cell after that run."""
    path = page.path
    code = page.code_cells
    ignored = ["nbval-ignore-output" in c.tags for c in code]
    for i, cell in enumerate(code):
        assert "nbval-skip" not in cell.tags, f"{path.name}: a skipped cell"
        if not ignored[i]:
            continue
        j = i
        while j + 1 < len(code) and ignored[j] and "assert" not in code[j].source:
            j += 1
        assert "assert" in code[j].source, f"{path.name}: an output-ignored cell checks nothing:\n{cell.source[:200]}"


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
