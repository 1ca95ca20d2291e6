"""A learner: one process that executes labs, asserts only, each setting in a copy of the labs of
its own, and prints a row per lab as it ends. An asserts-only pass of `booktools.run` is one
learner, and the condition `two` starts a second one beside the pass.

    python -m booktools.learners JSON     (what `start` runs, under booktools.children's tether)

A lab passes when every cell runs and no process it started is left (booktools.notebooks).
After each lab, its timing checks' values and bands (what dplab.timing.in_band kept in the
copy's artifacts/) go into its row.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from booktools.children import end_tree, follow, start_tree
from booktools.labs import Lab, facts
from dplab.timing import BANDS_FILE

#: How a row is printed by a learner or by an nbval pass's plugin, for the runner to read.
ROW = "lab verdict: "
#: After its limit a learner still reaps the processes of the lab it stopped (booktools.notebooks'
#: REAP_S): it is killed whole only this long after.
GRACE_S = 40


@dataclass
class Row:
    """One lab's verdict under one column (a pass, one of its settings, or its second learner),
    with its timing checks: {check: {value, low, high}}."""

    lab: str
    column: str
    result: str
    bands: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """It ran and left nothing running."""
        return self.result.startswith("ok") and "left running" not in self.result

    def line(self) -> str:
        return ROW + json.dumps(asdict(self))

    @classmethod
    def read(cls, line: str) -> Row | None:
        """The row a line carries (anywhere in it: pytest may put dots before), or None."""
        _, found, text = line.partition(ROW)
        return cls(**json.loads(text)) if found else None

    def said(self) -> str:
        """'04_ddp.ipynb [p=3]: ok (40 s)'."""
        return f"{self.lab} [{self.column}]: {self.result}"


def summary(rows: list[Row], who: str = "second learner") -> str:
    """'second learner: 8 passed, 1 failed (07_sharding.ipynb)'."""
    failed = [r.lab for r in rows if not r.passed]
    return (f"{who}: {len(rows) - len(failed)} passed, {len(failed)} failed"
            + (f" ({', '.join(failed)})" if failed else ""))


def unfinished(rows: list[Row], labs: list[Lab], columns: list[str], why: str) -> list[Row]:
    """The rows, then a failing row for each lab and column that has none."""
    have = {(r.lab, r.column) for r in rows}
    return rows + [Row(lab.name, column, f"FAIL: {why}") for lab in labs for column in columns
                   if (lab.name, column) not in have]


def with_mistake(source: bytes, old: str, new: str, where: str) -> bytes:
    """A notebook's bytes with `old` replaced by `new` in its code cells, where `old` stands once
    in all of them (a timing mistake, booktools.labs.TimingMistake); ValueError otherwise."""
    import nbformat

    nb = nbformat.reads(source.decode(), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    found = sum(c.source.count(old) for c in code)
    if found != 1:
        raise ValueError(f"{where}: the mistake's old text stands {found} times in the code cells, not once")
    for c in code:
        c.source = c.source.replace(old, new)
    return nbformat.writes(nb).encode()


def own_copies(labs: list[Lab], folder: Path, broken: dict[str, list[str]] | None = None) -> list[Path]:
    """The labs copied into folder/labs, with the files each reads outside labs/ (Lab.reads,
    relative to the folder above the lab's) linked beside: a copy writes its own artifacts/.
    broken: {lab's path: [old, new]}, a timing mistake made in that lab's copy."""
    (folder / "labs").mkdir(parents=True)
    copies = []
    for lab in labs:
        for read in lab.reads:
            link = folder / read
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(lab.path.resolve().parent.parent / read)
        copies.append(folder / "labs" / lab.name)
        source = lab.path.read_bytes()
        mistake = (broken or {}).get(str(lab.path.resolve()))
        copies[-1].write_bytes(with_mistake(source, *mistake, lab.name) if mistake else source)
    return copies


def run_lab(copy: Path, env: dict[str, str], deadline: float, limit_s: float) -> tuple[str, dict]:
    """Execute one copy of a lab (booktools.notebooks), no cell past `deadline` (time.monotonic());
    its verdict and the timing checks it kept."""
    from booktools.notebooks import NOTEBOOK_TIMEOUT_S, execute_file, verdict

    bands = copy.parent / BANDS_FILE
    bands.parent.mkdir(exist_ok=True)  # in_band keeps its records only where it exists
    bands.unlink(missing_ok=True)
    left = deadline - time.monotonic()
    if left < 1:
        return f"FAIL: not started within the {limit_s:g} s limit", {}
    nb, run = execute_file(copy, env=env, timeout=min(NOTEBOOK_TIMEOUT_S, left))
    said = verdict(nb, run)
    if run.stopped and time.monotonic() >= deadline - 1:
        said = f"FAIL: not finished within the {limit_s:g} s limit" + (
            f"; left running: {', '.join(sorted(set(run.left_running)))}" if run.left_running else "")
    kept = json.loads(bands.read_text()) if bands.exists() else {}
    return said, kept


def run_labs(labs: list[Lab], settings: list[tuple[str, dict[str, str]]], limit_s: float,
             folder: Path, say: Callable[[str], None] = print,
             broken: dict[str, list[str]] | None = None) -> list[Row]:
    """Lab by lab, each setting (column, environment) in turn, each on its own copy of the labs
    (with the timing mistakes of `broken` made in it); past `limit_s` no cell runs, and the labs
    left say so. Each row is said as it comes."""
    deadline = time.monotonic() + limit_s
    copies = {column: own_copies(labs, folder / f"setting{i}", broken) for i, (column, _) in enumerate(settings)}
    rows = []
    for i, lab in enumerate(labs):
        for column, env in settings:
            result, bands = run_lab(copies[column][i], env, deadline, limit_s)
            rows.append(Row(lab.name, column, result, bands))
            say(rows[-1].line())
    return rows


def main(argv: list[str]) -> int:
    """Run the labs a JSON argument names: {labs, settings, limit_s, broken (optional)}; a row per
    lab on stdout."""
    if len(argv) != 1:
        print("usage: python -m booktools.learners JSON (booktools.run starts it)", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    labs = [facts(Path(p)) for p in spec["labs"]]
    with tempfile.TemporaryDirectory(prefix="learner-") as tmp:
        rows = run_labs(labs, [tuple(s) for s in spec["settings"]], spec["limit_s"], Path(tmp),
                        lambda line: print(line, flush=True), spec.get("broken"))
    return 0 if all(r.passed for r in rows) else 1


class Learner:
    """A learner running in a process of its own (tethered: it dies with this process); its rows
    are said as they come."""

    def __init__(self, labs: list[Lab], settings: list[tuple[str, dict[str, str]]], env: dict[str, str],
                 limit_s: float, say: Callable[[str], None], broken: dict[str, list[str]] | None = None):
        self.labs, self.columns, self.limit_s, self.say = labs, [c for c, _ in settings], limit_s, say
        self.rows: list[Row] = []
        self.started = time.monotonic()
        spec = {"labs": [str(lab.path.resolve()) for lab in labs], "settings": settings, "limit_s": limit_s,
                "broken": broken or {}}
        self.process = start_tree([sys.executable, "-m", "booktools.learners", json.dumps(spec)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._lock = threading.Lock()

        def hear(line: str) -> None:
            row = Row.read(line)
            with self._lock:
                if row is not None:
                    self.rows.append(row)
                say(row.said() if row is not None else line)
        self._reader = follow(self.process.stdout, hear)

    def wait(self, timeout: float | None = None) -> list[Row]:
        """Wait for it (at most `timeout` s more, and never past its limit and a grace), then end
        what is left of it; a row for every lab and column, a lab it did not finish failing."""
        bound = self.limit_s + GRACE_S - (time.monotonic() - self.started)
        bound = bound if timeout is None else min(bound, timeout)
        try:
            self.process.wait(timeout=max(1.0, bound))
            why = "its learner stopped early"
        except subprocess.TimeoutExpired:
            why = f"not finished within the {self.limit_s:g} s limit"
        end_tree(self.process.pid)
        self._reader.join(timeout=10)
        with self._lock:
            rows = unfinished(list(self.rows), self.labs, self.columns, why)
            for row in rows[len(self.rows):]:
                self.say(row.said())
            return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
