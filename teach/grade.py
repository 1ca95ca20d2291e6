"""Grade a learner's lab: run it on the engines, bounded in time, and score its checks.

    python -m teach.grade NOTEBOOK [--timeout 900] [--cell-timeout 300] [--json FILE] [--all]
    make grade NB=NOTEBOOK

The checks are the cells whose nbgrader metadata says `grade: true` (teach.solutions); each
scores its points when it runs without an error, as nbgrader's autograder scores code cells.
Their code comes from the lab of the same name in labs/, so a learner who edits a check is
graded by the lab's check (the report says so). A failed check is reported with its error and
the first error in the cells before it, which is usually the cause (a stub's NotImplementedError,
or the kit's StuckRanksError when ranks hang or die).

The cells run in order, up to the last check (what follows scores nothing; --all runs it too),
in one kernel in the notebook's folder, with the caller's DPLAB_* settings, through
booktools.notebooks.execute, which bounds them: a cell that runs past --cell-timeout, or past
what is left of --timeout, stops the run, the kernel is killed, the kit's guardian ends its
cluster, and the checks not yet run fail. Nothing the run started is left: what is still alive
20 s after the kernel ends is killed and reported.
Exit status: 0 when every check passed, 1 when one failed, 2 when the notebook cannot be graded.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from booktools.labs import facts
from booktools.notebooks import CELL_TIMEOUT_S, EXPECTED, NOTEBOOK_TIMEOUT_S, code_number, execute
from booktools.pages import ROOT
from teach import sandbox as sandboxing
from teach import solutions


@dataclass
class Check:
    grade_id: str
    points: float
    cell: int
    passed: bool = False
    message: str = "not run"
    cause: str = ""  # the first error before this check, when it failed


@dataclass
class Report:
    notebook: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str = ""  # why the run ended early, if it did
    edited: list[str] = field(default_factory=list)  # checks the learner changed
    errors: list[str] = field(default_factory=list)  # errors in the cells that are not checks
    left_running: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(c.points for c in self.checks if c.passed)

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)


def checks(nb) -> list[Check]:
    """The notebook's graded checks, none run yet."""
    return [Check(solutions.grading(c)["grade_id"], solutions.grading(c)["points"], i)
            for i, c in enumerate(nb.cells) if solutions.is_check(c)]


def write_json(report: Report, path: Path) -> None:
    """--json's file: the report, with its score and max_score."""
    path.write_text(json.dumps({**asdict(report), "score": report.score, "max_score": report.max_score},
                               indent=1))


def read_json(path: Path) -> Report:
    """The report write_json wrote (ValueError, TypeError or KeyError if it is not one)."""
    r = json.loads(path.read_text())
    return Report(**{k: v for k, v in r.items() if k not in ("checks", "score", "max_score")},
                  checks=[Check(**c) for c in r["checks"]])


def first_lines(text: str, n: int = 4, width: int = 400) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()][:n]
    return "\n".join(lines)[:width]


RANK_ERROR = re.compile(r"^\[(\d+):\w+\]\s*(\w+): ?(.*)$")  # ipyparallel's "[1:execute]ValueError: msg"


def compact(ename: str, evalue: str) -> str:
    """One error in a few lines: the ranks' errors of an ipyparallel CompositeError or RemoteError
    merged, 'NotImplementedError: hint (ranks 0, 1)', else 'Name: the first lines'."""
    ranks: dict[str, list[str]] = {}
    for line in evalue.splitlines():
        m = RANK_ERROR.match(line.strip())
        if m:
            said = f"{m.group(2)}: {m.group(3)}" if m.group(3).strip() else m.group(2)
            ranks.setdefault(said, []).append(m.group(1))
    if ename in ("CompositeError", "RemoteError") and ranks:
        return "\n".join(f"{what} (rank{'s' * (len(rs) > 1)} {', '.join(rs)})" for what, rs in ranks.items())
    return f"{ename}: {first_lines(evalue)}" if evalue.strip() else ename


def stub_hints(source: str) -> list[str]:
    """The hints of the stubs still in a cell (nbgrader's stub, below its '# HINT:' line)."""
    lines = [line.strip() for line in source.split("\n")]
    return [solutions.HINT.match(a)["hint"] for a, b in zip(lines, lines[1:])
            if solutions.HINT.match(a) and b == solutions.NBGRADER_STUB[0]]


def error_of(cell, before=()) -> str:
    """The cell's error output, compacted, with the hint of a stub the learner left: in the
    cell, else the last one in the cells `before` it (a function it calls); '' if no error."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            said = compact(out["ename"], out["evalue"])
            hints = []
            if "NotImplementedError" in said:
                hints = stub_hints(cell.source) or [h for c in before for h in stub_hints(c.source)][-1:]
            return said + (f"\n  a stub is left to write, below '# HINT: {hints[0]}'" if hints else "")
    return ""


def label(nb, index: int) -> str:
    """How the report names a cell: 'code cell 7 (lab2-broadcast)', or by its first line of code."""
    number = code_number(nb, index)
    gid = solutions.grading(nb.cells[index]).get("grade_id")
    if gid:
        return f"code cell {number} ({gid})"
    first = next((line.strip() for line in nb.cells[index].source.splitlines()
                  if line.strip() and not line.lstrip().startswith(("%", "#"))), "")
    return f"code cell {number}" + (f" ({first[:40]}{'…' * (len(first) > 40)})" if first else "")


def load(path: Path, source_dir: Path):
    """The notebook, its checks restored from the lab of the same name, and the checks' names
    the learner had changed. SystemExit (status 2) when it cannot be graded."""
    if not path.is_file():
        raise SystemExit(f"grade: no such notebook: {path}")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several kinds for a file that is not a notebook
        raise SystemExit(f"grade: {path} is not a notebook ({type(e).__name__}: {e})")
    lab_path = source_dir / path.name
    if not lab_path.is_file():
        raise SystemExit(f"grade: {path.name} is not the name of a lab in {source_dir}: keep the "
                         "name `make student` gave the notebook")
    lab = nbformat.read(lab_path, as_version=4)
    wanted = {solutions.grading(c)["grade_id"]: c for c in lab.cells if solutions.is_check(c)}
    if not wanted:
        raise SystemExit(f"grade: the lab {lab_path.name} has no graded check to score")
    have = {solutions.grading(c).get("grade_id"): c for c in nb.cells if solutions.is_check(c)}
    missing = sorted(set(wanted) - set(have))
    if missing:
        raise SystemExit(f"grade: {path.name} lacks the check cells {', '.join(missing)}: the learner "
                         "deleted them or their metadata; restore them from `make student`'s copy")
    edited = []
    for gid, cell in have.items():
        if gid in wanted and cell.source != wanted[gid].source:
            edited.append(gid)
            cell.source = wanted[gid].source
        cell.metadata["nbgrader"] = dict(wanted[gid].metadata["nbgrader"]) if gid in wanted else {}
    return nb, edited


def grade(path: Path, *, timeout: float = NOTEBOOK_TIMEOUT_S, cell_timeout: float = CELL_TIMEOUT_S,
          source_dir: Path = ROOT / "labs", run_all: bool = False,
          sandbox: bool = False, hide: tuple[Path, ...] = (), memory: int | None = None) -> Report:
    """Grade the notebook; with `sandbox`, its kernel runs as an account of teach.sandbox's pool,
    in namespaces of its own, in a copy of the notebook's folder with the files the lab reads,
    and sees none of `hide` (nor labs/, .git/, root's home), nor the runs graded beside it; its
    memory is bounded at `memory` bytes (default teach.sandbox.MEMORY)."""
    nb, edited = load(path, source_dir)
    if not sandbox:
        return run_checks(nb, edited, path, path.resolve().parent, timeout=timeout,
                          cell_timeout=cell_timeout, run_all=run_all)
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    with sandboxing.lease() as who:
        run = sandboxing.new_run(path, [ROOT / read for read in facts(source_dir / path.name).reads], who)
        specs = Path(tempfile.mkdtemp(prefix="dplab-kernelspec-"))
        try:
            group = sandboxing.memory_bound(who, memory or sandboxing.MEMORY)
            name = sandboxing.write_kernelspec(specs, run, list(hide), who, group)
            # IPC sockets in the run's folder: the kernel's network namespace has only its loopback
            km = AsyncKernelManager(kernel_name=name, transport="ipc", ip=sandboxing.ipc_prefix(run),
                                    kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
            report = run_checks(nb, edited, path, run / "labs", timeout=timeout,
                                cell_timeout=cell_timeout, run_all=run_all, km=km)
            if killed := sandboxing.killed_for_memory(group):
                bound = f"{(memory or sandboxing.MEMORY) / 2**30:g} GiB"
                report.stopped = (f"the run reached its memory bound ({bound}): the kernel's OOM "
                                  f"killer ended {killed} of its processes"
                                  + (f"; {report.stopped}" if report.stopped else ""))
            return report
        finally:
            shutil.rmtree(specs, ignore_errors=True)
            shutil.rmtree(run, ignore_errors=True)


def run_checks(nb, edited: list[str], path: Path, folder: Path, *, timeout: float,
               cell_timeout: float, run_all: bool, km=None) -> Report:
    """Run the cells in a kernel started in `folder` (by `km`, if given), and score the checks."""
    report = Report(path.name, checks(nb), edited=edited)
    run = execute(nb, folder, km=km, timeout=timeout, cell_timeout=cell_timeout, stop_on_error=False,
                  last=None if run_all else max(c.cell for c in report.checks), label=label)
    report.seconds, report.stopped, report.left_running = run.seconds, run.stopped, run.left_running
    ran = set(run.ran)
    away = sorted(set(run.forked_away))  # it would outlive the grading but for the sandbox
    why_away = f"the notebook forked away processes that its kernel did not wait for ({', '.join(away)})"
    if away:
        report.stopped = (f"{why_away}: a graded notebook must leave nothing running, so no check "
                          "counts" + (f"; {report.stopped}" if report.stopped else ""))
        report.left_running = sorted(set(report.left_running) | set(away))

    first_error = ""
    for index, cell in enumerate(nb.cells):
        expected = EXPECTED in cell.metadata.get("tags", [])
        err = "" if expected or index not in ran else error_of(cell, nb.cells[:index])
        check = next((c for c in report.checks if c.cell == index), None)
        if check:
            if away:
                check.message, check.cause = why_away, first_error
            elif index not in ran:
                check.message, check.cause = f"not run: {report.stopped.splitlines()[0]}", first_error
            elif err:
                check.message, check.cause = err, first_error
            else:
                check.passed, check.message = True, "ok"
        elif err:
            report.errors.append(f"{label(nb, index)}: {err}")
        if err and not first_error:
            first_error = f"{label(nb, index)}: {err}"
    return report


def render(report: Report) -> str:
    passed = sum(c.passed for c in report.checks)
    indent = "\n" + " " * 10
    lines = [f"{report.notebook}: graded in {report.seconds:.0f} s"]
    if report.edited:
        lines.append(f"  (the learner had changed the checks {', '.join(report.edited)}: graded with the lab's)")
    if report.errors:
        lines.append("  errors in the other cells, in order (the first is often the cause of the rest):")
        lines += ["    " + e.replace("\n", "\n      ") for e in report.errors]
    for c in report.checks:
        verdict = "pass" if c.passed else "FAIL"
        lines.append(f"  {verdict}  {c.points * c.passed:g}/{c.points:g}  {c.grade_id}"
                     + ("" if c.passed else ": " + c.message.replace("\n", indent)))
        if c.cause and not c.passed and not report.errors:
            lines.append(f"          after the first error, {c.cause.splitlines()[0]}")
    if report.stopped:
        lines.append(f"  stopped early: {report.stopped}")
    if report.left_running:
        lines.append(f"  left running, now killed: {', '.join(sorted(set(report.left_running)))}")
    lines.append(f"score: {report.score:g} / {report.max_score:g} points "
                 f"({passed} of {len(report.checks)} checks passed)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--timeout", type=float, default=NOTEBOOK_TIMEOUT_S,
                    help="seconds for the whole notebook")
    ap.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S, help="seconds for one cell")
    ap.add_argument("--json", type=Path, help="also write the report here, as JSON")
    ap.add_argument("--all", action="store_true", help="run the cells after the last check too")
    ap.add_argument("--sandbox", action="store_true", help="run the learner's code as an "
                    f"unprivileged account ({sandboxing.ACCOUNT}-N), blind to labs/, each --hide "
                    "folder and the runs graded beside it (needs root; teach.sandbox)")
    ap.add_argument("--hide", type=Path, action="append", default=[], metavar="FOLDER",
                    help="with --sandbox: a folder the learner's code must not see, e.g. the class's")
    ap.add_argument("--memory", type=float, default=sandboxing.MEMORY / 2**30, metavar="GIB",
                    help="with --sandbox: the run's memory bound, every process of it together "
                    "(default: %(default)g GiB)")
    ap.add_argument("--source", type=Path, default=ROOT / "labs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.timeout <= 0 or args.cell_timeout <= 0:
        ap.error("--timeout and --cell-timeout take seconds > 0")
    if args.hide and not args.sandbox:
        ap.error("--hide hides folders from the sandbox: add --sandbox")
    if args.memory <= 0:
        ap.error("--memory takes GiB > 0, such as 8")
    if args.sandbox and sandboxing.unavailable():
        ap.error(sandboxing.unavailable())
    try:
        report = grade(args.notebook, timeout=args.timeout, cell_timeout=args.cell_timeout,
                       source_dir=args.source, run_all=args.all, sandbox=args.sandbox,
                       hide=tuple(args.hide), memory=int(args.memory * 2**30))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print(render(report))
    if args.json:
        write_json(report, args.json)
    return 0 if all(c.passed for c in report.checks) and not report.left_running else 1


if __name__ == "__main__":
    sys.exit(main())
