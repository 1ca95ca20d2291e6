"""Re-execute labs in place and store their outputs (make labs):

    python -m booktools.store labs/*.ipynb

Each lab runs through booktools.notebooks (its timeout rule; a cell tagged raises-exception may
raise). A lab whose cell fails is not written, and the exit status is 1. Each stored lab's wall
time goes into benchmarks/results/lab_times.json with the machine's name: the labs' "About N
minutes" and the intro's table are checked against it (booktools/numbers.py).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from booktools.pages import ROOT

TIMES = ROOT / "benchmarks" / "results" / "lab_times.json"


def store(path: Path, times: Path = TIMES) -> str:
    """Run the lab at `path`, write it back with its new outputs and record its wall time;
    the verdict. SystemExit, writing nothing, if a cell fails."""
    import nbformat

    from booktools.notebooks import execute_file, verdict
    from dplab.timing import machine

    nb, run = execute_file(path)
    said = verdict(nb, run)
    if run.errors(nb) or run.stopped:
        raise SystemExit(f"{path}: {said}; its outputs were not stored")
    nbformat.write(nb, path)
    record = json.loads(times.read_text()) if times.exists() else {"labs": {}}
    record["labs"][Path(path).stem] = round(run.seconds, 1)
    record["machine"] = machine()
    times.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return said


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m booktools.store labs/NN_lab.ipynb ...", file=sys.stderr)
        return 2
    for path in argv:
        print(f"{path}: stored, {store(Path(path))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
