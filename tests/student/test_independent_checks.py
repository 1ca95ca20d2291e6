"""Each graded check depends on one solution cell and on the lab's set-up: a learner who
solves one cell scores exactly the points of the checks that depend on it, whatever the others
hold (stubs). An unsolved model must not cost an exercise's points, and a stub must not stop
the cluster that the later checks run on (its NotImplementedError raises on every rank).

Each lab's metadata names the solution cell of each check whose name does not say it
(booktools.labs: Lab.depends, read through Lab.solution_of; `labN-check-X` depends on
`labN-X`). A step or an exercise that builds on an earlier step's function or model runs the
book's own (`from labcode import transformer as book`), so that a slip in the earlier step
costs only that step's points; its check computes its own references. The fast test reads
every lab: each check depends on a solution cell above it, and every solution cell is checked.
The slow test builds a lab's student notebook (teach.student), pastes back ONE solution cell at
a time, the others left as stubs, grades each at DPLAB_ENGINES=2 (teach.grade), and asserts that
exactly the checks of that cell pass, for their points. Grading every lab so takes long: by
default it grades one lab, fixed by the repository's tree (booktools.labs.by_tree: the same tree
always grades the same lab, successive commits rotate), and of that lab as many of its solution
cells as fit CELLS_BUDGET_S of the lab's own run time (lab_times.json), in an order the tree
also fixes: so one tree costs about the same whichever lab it picks (Lab 5's three cells took
176 s, two thirds of its run time each; Lab 4's eight would take about 300 s), and successive
trees reach every cell. It says which cells it grades. INDEPENDENT_LABS=all, or =02,06, chooses
labs, and grades every cell of each.
"""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from booktools.labs import Lab, by_tree, in_tree_order, labs
from booktools.numbers import lab_minutes
from teach import solutions
from tests.support.grading import grade, picked

LABS = labs()
# Labs whose checks are not independent yet: the slow test expects them to fail (strictly:
# remove a lab once it passes). None left.
PENDING: dict[str, str] = {}
ENGINES = "2"
#: The lab run time (when its outputs were stored, 4 engines) that one tree spends on gradings,
#: one grading per solution cell: at least one cell, and every cell of a lab the environment names.
CELLS_BUDGET_S = 120


def cells(lab: Lab) -> tuple[list[str], dict[str, str]]:
    """The lab's solution cells in order, and each check's solution cell."""
    nb = nbformat.read(lab.path, as_version=4)
    sols, depends = [], {}
    for cell in nb.cells:
        gid = solutions.grading(cell).get("grade_id")
        if solutions.is_solution(cell):
            sols.append(gid)
        elif solutions.is_check(cell):
            depends[gid] = lab.solution_of(gid)
    return sols, depends


CHOSEN = picked("INDEPENDENT_LABS", salt="independent checks")


def within_budget(lab: Lab, sols: list[str], budget_s: float = CELLS_BUDGET_S) -> list[str]:
    """The solution cells of `lab` that this tree grades: as many as fit `budget_s` of the lab's
    run time, in an order fixed by the tree (booktools.labs.in_tree_order: successive trees
    reach every cell), listed in the lab's own order."""
    keep = max(1, int(budget_s // (lab_minutes(lab.stem) * 60)))
    first = in_tree_order(sols, f"independent checks, {lab.stem}")[:keep]
    return [gid for gid in sols if gid in first]


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_each_check_depends_on_one_solution_cell_above_it_and_each_such_cell_has_a_check(lab):
    sols, depends = cells(lab)
    nb = nbformat.read(lab.path, as_version=4)
    at = {solutions.grading(c).get("grade_id"): i for i, c in enumerate(nb.cells)}
    assert set(lab.depends) <= set(depends), "the lab's metadata (dplab.depends) names a check it lacks"
    for check, sol in depends.items():
        assert sol in sols, f"{check} depends on no solution cell ({sol!r}): declare it"
        assert at[sol] < at[check], f"{check} comes before {sol}, the cell it checks"
    unchecked = [s for s in sols if s not in depends.values()]
    assert not unchecked, f"solution cells no check grades: {unchecked}"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.stem)
def test_a_tree_grades_the_cells_that_fit_the_budget_and_trees_reach_every_cell(lab):
    sols, _ = cells(lab)
    graded = within_budget(lab, sols)
    one = lab_minutes(lab.stem) * 60
    assert graded and set(graded) <= set(sols) and graded == [s for s in sols if s in graded]
    assert len(graded) == len(sols) or len(graded) == 1 or len(graded) * one <= CELLS_BUDGET_S
    assert len(graded) == len(sols) or (len(graded) + 1) * one > CELLS_BUDGET_S  # no cell left out that fits
    reached = {gid for t in range(200) for gid in in_tree_order(sols, f"tree {t}")[:len(graded)]}
    assert reached == set(sols)


def solved(student: Path, lab: Lab, gids: tuple[str, ...], folder: Path) -> Path:
    """The student notebook with only the solution cells `gids` pasted back, in `folder` beside
    the handout's labs/ (so that the handout's other files are where the lab looks)."""
    nb = nbformat.read(student, as_version=4)
    refs = {solutions.grading(c).get("grade_id"): c for c in nbformat.read(lab.path, as_version=4).cells}
    for cell in nb.cells:
        gid = solutions.grading(cell).get("grade_id")
        if gid in gids:
            cell.source = solutions.paste_back(cell.source, refs[gid].source, gid)
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / lab.name)
    return folder / lab.name


def picks(root: Path) -> list[str]:
    """by_tree's pick among 9 items for 20 salts, and in_tree_order's order of them for one, in
    the repository at `root`."""
    return [by_tree(list("abcdefghi"), f"salt {i}", root=root) for i in range(20)] + [
        "".join(in_tree_order(list("abcdefghi"), "cells", root=root))]


def test_the_lab_graded_by_default_is_fixed_by_the_tree(tmp_path, monkeypatch):
    """Not by the day of the year: the same tree picks the same lab, and the same order of its
    cells, on any commit and any day; a new tree picks anew; without git, the labs' bytes stand
    for the tree; the environment's choice wins."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above it
    (tmp_path / "_toc.yml").write_text("root: intro\nparts:\n- caption: Labs\n"
                                       "  chapters:\n  - file: labs/00_a\n")
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "00_a.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    without_git = picks(tmp_path)
    assert picks(tmp_path) == without_git
    (tmp_path / "labs" / "00_a.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("1")])))
    assert picks(tmp_path) != without_git
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    first = picks(tmp_path)
    assert first != without_git and len(set(first[:20])) > 1 and sorted(first[20]) == list("abcdefghi")
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the same tree"], check=True)
    assert picks(tmp_path) == first
    (tmp_path / "intro.md").write_text("# Intro\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a new tree"], check=True)
    assert picks(tmp_path)[:20] != first[:20] and picks(tmp_path)[20] != first[20]
    monkeypatch.setenv("INDEPENDENT_LABS", "02,06")
    assert [lab.stem[:2] for lab in picked("INDEPENDENT_LABS", "independent checks")] == ["02", "06"]
    monkeypatch.delenv("INDEPENDENT_LABS")
    assert picked("INDEPENDENT_LABS", "independent checks") == [by_tree(LABS, "independent checks")]


@pytest.mark.parametrize("lab", CHOSEN, ids=lambda lab: lab.stem)
def test_one_solved_cell_scores_exactly_its_own_checks(handout, lab, request):
    if lab.stem in PENDING:
        request.node.add_marker(pytest.mark.xfail(reason=PENDING[lab.stem], strict=True))
    sols, depends = cells(lab)
    if not os.environ.get("INDEPENDENT_LABS", "").strip():
        graded = within_budget(lab, sols)
        print(f"{lab.stem}: grading {len(graded)} of its {len(sols)} solution cells, each alone "
              f"({', '.join(graded)}); INDEPENDENT_LABS={lab.stem[:2]} grades them all", file=sys.__stderr__)
        sols = graded
    points = {solutions.grading(c)["grade_id"]: solutions.grading(c)["points"]
              for c in nbformat.read(lab.path, as_version=4).cells if solutions.is_check(c)}
    wrong = []
    for gid in sols:
        notebook = solved(handout / lab.name, lab, (gid,), handout.parent / f"only-{gid}")
        status, report, printed = grade(notebook, engines=ENGINES)
        assert report and not report["stopped"], printed
        passed = {c["grade_id"] for c in report["checks"] if c["passed"]}
        # a stub raises on every rank: no rank left waiting, no cluster stopped
        stuck = [e for e in report["errors"] + [c["message"] for c in report["checks"]]
                 if "StuckRanksError" in e or "sockets have been closed" in e]
        mine = {c for c, sol in depends.items() if sol == gid}
        print(f"{lab.stem}, only {gid} solved: {report['score']:g} of "
              f"{sum(points[c] for c in mine):g} points, in {report['seconds']:.0f} s")
        if stuck:
            wrong.append(f"only {gid} solved: the cluster stopped: {stuck[0]}")
        if passed != mine or report["score"] != sum(points[c] for c in mine):
            wrong.append(f"only {gid} solved: passed {sorted(passed)}, expected "
                         f"{sorted(mine)}\n{printed}")
    assert not wrong, "\n\n".join(wrong)
