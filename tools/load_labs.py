"""Every lab that times anything, run under the load of a shared machine; a table lab x condition.

    python tools/load_labs.py                     # every condition (make test-load)
    python tools/load_labs.py --conditions busy two   # some of them (LOAD="busy two")

The conditions, each a run of every timing lab (a lab whose checks call dplab.timing.in_band),
each in its own copy of labs/:
    quiet1, quiet2, quiet3   three runs in a row, on an otherwise quiet machine
    busy                     beside one process that keeps one core busy the whole time
    two                      two learners on one node: two copies of each lab at once, each
                             with its own cluster
    p=2, p=6                 at other engine counts
Every assert runs, as in make test-any-p; outputs are not compared. Below each lab's verdict the
table shows every timing check's measured value and its band (what in_band kept), so the margin
shows. A lab passes when every cell runs and no process it started is left.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import busy_core  # noqa: E402  (scripts beside this one)
import run_labs  # noqa: E402

from dplab.cluster.settings import DEFAULT_ENGINES  # noqa: E402
from dplab.timing import BANDS_FILE  # noqa: E402

ROOT = run_labs.ROOT
#: name -> (the extra environment of each learner, whether a core is kept busy beside them)
CONDITIONS: dict[str, tuple[list[dict[str, str]], bool]] = {
    "quiet1": ([{}], False),
    "quiet2": ([{}], False),
    "quiet3": ([{}], False),
    "busy": ([{}], True),
    "two": ([{}, {}], False),
    "p=2": ([{"DPLAB_ENGINES": "2"}], False),
    "p=6": ([{"DPLAB_ENGINES": "6"}], False),
}
#: One condition may take this long, whole, before it is killed (its unfinished labs fail).
CONDITION_TIMEOUT_S = 1800


def timing_labs() -> list[Path]:
    """The labs whose checks time something: their code calls in_band."""
    return [lab for lab in sorted((ROOT / "labs").glob("*.ipynb")) if "in_band(" in lab.read_text()]


def run_learner(labs: list[Path], env: dict[str, str]) -> None:
    """One learner (a child process): the labs in turn, in a copy of their own; a JSON line each."""
    parent = os.getppid()

    def orphaned() -> None:  # the parent died (even by SIGKILL): stop at once, kernels and all
        while os.getppid() == parent:
            time.sleep(1)
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="load_labs-") as tmp:
        for lab in run_labs.own_copies(labs, Path(tmp)):
            bands = lab.parent / BANDS_FILE
            bands.parent.mkdir(exist_ok=True)  # in_band keeps its records only where it exists
            bands.unlink(missing_ok=True)
            result = run_labs.run_lab(lab, env)
            kept = json.loads(bands.read_text()) if bands.exists() else {}
            print(json.dumps({"lab": lab.name, "result": result, "bands": kept}), flush=True)


def start_learner(labs: list[Path], env: dict[str, str]) -> subprocess.Popen:
    """One learner, in a session of its own; its stdout gives a JSON line per lab."""
    return subprocess.Popen([sys.executable, __file__, "--learner", json.dumps(env), *map(str, labs)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)


def learner_rows(proc: subprocess.Popen, labs: list[Path], timeout: float) -> list[dict]:
    """Wait up to `timeout` s for a learner, then kill what is left of it; one row per lab, a lab
    it did not finish with a failure that says so."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        run_labs.kill_tree(proc.pid)
        out, _ = proc.communicate()
    return with_unfinished([json.loads(line) for line in out.splitlines() if line.startswith("{")], labs)


def with_unfinished(done: list[dict], labs: list[Path]) -> list[dict]:
    """The rows of the labs a learner finished, then a failing row for each lab it did not."""
    ran = {row["lab"] for row in done}
    return done + [{"lab": lab.name, "result": f"FAIL: not finished within {CONDITION_TIMEOUT_S} s",
                    "bands": {}} for lab in labs if lab.name not in ran]


def run_condition(name: str, labs: list[Path]) -> list[dict]:
    """Every lab under one condition; one {lab, result, bands} per lab and learner."""
    learners, busy = CONDITIONS[name]
    burner = busy_core.start() if busy else None
    procs = [start_learner(labs, env) for env in learners]
    rows, t0 = [], time.monotonic()
    try:
        for i, proc in enumerate(procs):
            done = learner_rows(proc, labs, CONDITION_TIMEOUT_S - (time.monotonic() - t0))
            for row in done:
                row["learner"] = i
                print(f"{row['lab']} [{name}{'' if len(procs) == 1 else f', learner {i + 1}'}]: "
                      f"{row['result']}", flush=True)
            rows += done
    finally:
        for proc in procs:
            run_labs.kill_tree(proc.pid)
        if burner is not None:
            run_labs.kill_tree(burner.pid)
    return rows


def band_text(band: dict) -> str:
    """'0.93 in [0.5, 1.25]', or with 'OUT' when the value falls outside."""
    inside = band["low"] <= band["value"] <= band["high"]
    return f"{band['value']:.3g} {'in' if inside else 'OUT of'} [{band['low']:.3g}, {band['high']:.3g}]"


def table(labs: list[Path], results: dict[str, list[dict]]) -> list[list[str]]:
    """Rows: each lab's verdict, then each of its timing checks; a column per condition (and learner)."""
    columns = [(name, i) for name, rows in results.items() for i in sorted({r["learner"] for r in rows})]
    several = {name for name, rows in results.items() if len({r["learner"] for r in rows}) > 1}
    header = ["lab / check"] + [f"{n} #{i + 1}" if n in several else n for n, i in columns]
    by = {(r["lab"], name, r["learner"]): r for name, rows in results.items() for r in rows}
    out = [header]
    for lab in labs:
        out.append([lab.stem] + [by[lab.name, n, i]["result"] for n, i in columns])
        checks = sorted({c for (lb, _, _), r in by.items() if lb == lab.name for c in r["bands"]})
        for check in checks:
            out.append([f"  {check}"] + [band_text(by[lab.name, n, i]["bands"][check])
                                         if check in by[lab.name, n, i]["bands"] else "-" for n, i in columns])
    return out


def passed(result: str) -> bool:
    """A lab's verdict is a pass: it ran and left nothing running."""
    return result.startswith("ok") and "left running" not in result


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
        if k == 0:
            print("-+-".join("-" * w for w in widths))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", type=Path, help="notebooks (default: every lab that calls in_band)")
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS), metavar="NAME",
                    help=f"which conditions, in this order (default: all of {' '.join(CONDITIONS)})")
    ap.add_argument("--learner", help=argparse.SUPPRESS)  # one learner's run, from run_condition
    args = ap.parse_args()
    unknown = [c for c in args.conditions if c not in CONDITIONS]
    if unknown:
        hint = ("; name the notebooks before --conditions, which takes every word after it"
                if any(c.endswith(".ipynb") for c in unknown) else "")
        ap.error(f"unknown condition(s) {', '.join(unknown)}: choose from {' '.join(CONDITIONS)}{hint}")
    labs = [lab.resolve() for lab in args.labs] or timing_labs()
    missing = [str(p) for p in labs if not p.is_file()]
    if missing:
        ap.error(f"no such notebook: {', '.join(missing)}")
    if args.learner is not None:
        run_learner(labs, json.loads(args.learner))
        return 0

    print(f"{len(labs)} timing labs x conditions {' '.join(args.conditions)}; default p = {DEFAULT_ENGINES}; "
          f"{os.cpu_count()} cores", flush=True)
    results = {}
    for name in args.conditions:
        t0 = time.monotonic()
        results[name] = run_condition(name, labs)
        print(f"condition {name}: {time.monotonic() - t0:.0f} s", flush=True)
    print()
    print_table(table(labs, results))
    verdicts = [r["result"] for rows in results.values() for r in rows]
    failed = sum(not passed(v) for v in verdicts)
    print(f"\n{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
