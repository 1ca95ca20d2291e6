"""Solution regions and graded checks in the labs, in nbgrader's format.

A lab marks the code a learner should write with nbgrader's two marker lines, after a one-line
hint, in a code cell whose metadata says it is a solution cell:

    # HINT: divide by p, then all-reduce the buffer
    ### BEGIN SOLUTION
    ...
    ### END SOLUTION

A check cell the grader scores has `grade: true` and its `points`. nbgrader's own ClearSolutions
(`make student`, or `nbgrader generate_assignment`) replaces the marked lines with its stub,

    # HINT: divide by p, then all-reduce the buffer
    # YOUR CODE HERE
    raise NotImplementedError()

so the hint reaches the learner either way; the book, labcode/ and nbval never see the three
lines. This module only reads and checks them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

HINT = re.compile(r"^(?P<indent>[ \t]*)# HINT:[ \t]*(?P<hint>.*?)[ \t]*$")
BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?P<rest>.*?)[ \t]*$")
END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
NBGRADER_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]  # ClearSolutions.code_stub
SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
WIDTH = 88  # the book's code width (tests/test_code_width.py), which stubs keep too


@dataclass(frozen=True)
class Region:
    """One solution region: its lines [begin, end] (the hint line to END SOLUTION), indent and
    hint."""

    begin: int
    end: int
    indent: str
    hint: str


def is_marker(line: str) -> bool:
    return bool(BEGIN.match(line) or END.match(line) or HINT.match(line))


def strip_markers(source: str) -> str:
    """The cell's code as the book shows it: without the hint and marker lines."""
    return "\n".join(line for line in source.split("\n") if not is_marker(line))


def regions(source: str, where: str = "cell") -> list[Region]:
    """The solution regions of a cell's source; ValueError, saying where, on a malformed one."""
    found, begin = [], None
    lines = source.split("\n")
    for i, line in enumerate(lines):
        b, h = BEGIN.match(line), HINT.match(line)
        if h and not (i + 1 < len(lines) and BEGIN.match(lines[i + 1])):
            raise ValueError(f"{where}, line {i + 1}: a '# HINT:' line must stand just above "
                             "'### BEGIN SOLUTION'")
        if b:
            if begin is not None:
                raise ValueError(f"{where}, line {i + 1}: a BEGIN SOLUTION inside another region")
            if b.group("rest"):
                raise ValueError(f"{where}, line {i + 1}: write the marker alone, as "
                                 "'### BEGIN SOLUTION', with the hint on the line above it, "
                                 "as '# HINT: what to write'")
            hint = HINT.match(lines[i - 1]) if i else None
            if not hint or not hint.group("hint") or hint.group("indent") != b.group("indent"):
                raise ValueError(f"{where}, line {i + 1}: write the hint on the line above, "
                                 "indented as the marker: '# HINT: what to write'")
            begin = (i - 1, b.group("indent"), hint.group("hint"))
        elif END.match(line):
            if begin is None:
                raise ValueError(f"{where}, line {i + 1}: END SOLUTION without a BEGIN SOLUTION")
            if i == begin[0] + 2:
                raise ValueError(f"{where}, line {i + 1}: an empty solution region")
            found.append(Region(begin[0], i, begin[1], begin[2]))
            begin = None
        elif "BEGIN SOLUTION" in line or "END SOLUTION" in line:
            raise ValueError(f"{where}, line {i + 1}: write the marker alone on its line, "
                             f"as '### BEGIN SOLUTION' or '### END SOLUTION': {line.strip()!r}")
    if begin is not None:
        raise ValueError(f"{where}, line {begin[0] + 2}: BEGIN SOLUTION without an END SOLUTION")
    return found


def stub_lines(region: Region) -> list[str]:
    """What a learner sees in place of a region: the hint, and nbgrader's stub."""
    return [f"{region.indent}# HINT: {region.hint}"] + [
        region.indent + line for line in NBGRADER_STUB]


def stub(source: str, where: str = "cell") -> str:
    """The cell's source with every region replaced by its stub."""
    lines, out, last = source.split("\n"), [], 0
    for r in regions(source, where):
        out += lines[last:r.begin] + stub_lines(r)
        last = r.end + 1
    return "\n".join(out + lines[last:])


def paste_back(student: str, reference: str, where: str = "cell") -> str:
    """A student cell with the reference cell's regions (markers included) in place of its stubs."""
    refs, lines = regions(reference, where), reference.split("\n")
    out, rest = [], student.split("\n")
    for r in refs:
        mine, n = stub_lines(r), len(stub_lines(r))
        stub_at = next((i for i in range(len(rest) - n + 1) if rest[i:i + n] == mine), None)
        if stub_at is None:
            raise ValueError(f"{where}: the stub for the hint {r.hint!r} is not in the cell")
        out += rest[:stub_at] + lines[r.begin:r.end + 1]
        rest = rest[stub_at + n:]
    return "\n".join(out + rest)


def grading(cell) -> dict:
    """A cell's nbgrader metadata ({} if none)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def is_solution(cell) -> bool:
    return bool(grading(cell).get("solution"))


def is_check(cell) -> bool:
    return bool(grading(cell).get("grade"))


def check_notebook(nb, name: str) -> list[str]:
    """What is wrong with a lab's regions and checks, one message each ([] if nothing)."""
    problems, ids = [], set()
    n_regions = n_checks = 0
    for i, cell in enumerate(nb.cells):
        where = f"{name}, cell {i}"
        meta = grading(cell)
        if cell.cell_type != "code":
            if meta:
                problems.append(f"{where}: nbgrader metadata on a {cell.cell_type} cell "
                                "(only code cells are solutions or checks here)")
            continue
        try:
            found = regions(cell.source, where)
        except ValueError as e:
            problems.append(str(e))
            continue
        if found and not meta.get("solution"):
            problems.append(f"{where}: a solution region in a cell not marked as a solution "
                            "cell (its metadata needs nbgrader.solution = true)")
        if not meta:
            continue
        gid = meta.get("grade_id")
        if not gid or gid in ids:
            problems.append(f"{where}: grade_id {gid!r} is missing or used twice")
        ids.add(gid)
        if meta.get("schema_version") != SCHEMA_VERSION:
            problems.append(f"{where}: nbgrader schema_version is not {SCHEMA_VERSION}")
        if meta.get("solution") and meta.get("grade"):
            problems.append(f"{where}: a cell is either a solution or a check, not both")
        if meta.get("solution"):
            long = [line for r in found for line in stub_lines(r) if len(line) > WIDTH]
            if long:
                problems.append(f"{where}: the hint makes its stub wider than {WIDTH} columns, "
                                f"shorten it: {long[0].strip()!r}")
            if not found:
                problems.append(f"{where}: a solution cell without a region")
            n_regions += len(found)
        if meta.get("grade"):
            n_checks += 1
            if not isinstance(meta.get("points"), (int, float)) or meta["points"] <= 0:
                problems.append(f"{where}: a check without points > 0")
    if not n_regions:
        problems.append(f"{name}: no solution region")
    if not n_checks:
        problems.append(f"{name}: no graded check")
    return problems
