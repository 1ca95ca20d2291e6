"""Time the README's commands from a clean clone and save them for the README's table.

    python -m booktools.commands                       # make test, make test-any-p, make book
    python -m booktools.commands test                  # only make test
    python -m booktools.commands "torch-releases TORCH=2.8.0 &" test   # the first beside the second

Clones this repository's HEAD into a temporary folder, runs each `make` target there one after
the other (pip's cache is reused, nothing else), and writes its times at the top of
benchmarks/results/commands.txt; the earlier times of the other targets stay below, each under
the header of its own run. A target that ends in "&" runs beside the next one, as .ci/run runs
it: its row is its own time, and the next row's time includes waiting for it, so the foreground
rows add up to the run's. `python -m booktools.readme` then puts the times into README.md.
What a target writes in the clone's benchmarks/results/ (make test-torch's verdict with
RECORD=1 in the environment, make bench-nodes' figures) is copied back here.
"""
from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from booktools.beside import start_background
from booktools.children import end_tree, start_tree
from booktools.pages import ROOT
from booktools.readme import COMMAND_ROW, command_runs
from dplab.timing import machine

OUT = ROOT / "benchmarks" / "results" / "commands.txt"


def earlier_runs(text: str, retimed: list[str]) -> list[str]:
    """The runs saved in an earlier commands.txt, less the rows of the targets timed again
    (and runs that have no row left)."""
    kept = []
    for run in command_runs(text):
        lines = [line for line in run.splitlines(keepends=True)
                 if not (m := COMMAND_ROW.match(line.rstrip("\n"))) or m.group(1) not in retimed]
        if any(line.startswith("make ") for line in lines):
            kept.append("".join(lines))
    return kept


def started_beside(args: list[str], clone: Path):
    """`make ARGS` started in the clone at the lowest CPU priority, under a tether (it and all it
    starts die with this process), and a function that waits for it and gives its seconds, from
    its start to its end."""
    t0 = time.perf_counter()
    proc = start_background(["make", *args], cwd=clone)
    ended = []
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.perf_counter())), daemon=True)
    waiter.start()

    def took() -> float:
        waiter.join()
        return ended[0] - t0
    return proc, took


def main(argv: list[str] | None = None) -> int:
    """Time the targets named (default: test, test-any-p, book) and save their times."""
    targets = (sys.argv[1:] if argv is None else argv) or ["test", "test-any-p", "book"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"$ python -m booktools.commands {' '.join(targets)}   # {stamp}, clean clone of {commit}\n",
             f"machine: {machine()}\n"]
    # Killed (SIGTERM), the run ends what it started, and then removes the clone
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as ending:
        ending.callback(lambda: [end_tree(p.pid) for p in started if p.poll() is None])
        clone = Path(tmp) / "book"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        beside = None  # a target ending in "&": (target, its process, its seconds when it ends)
        for target in targets:
            if target.endswith("&"):  # started now at the lowest priority, as .ci/run does
                beside = (target, *started_beside(target[:-1].split(), clone))
                started.append(beside[1])
                continue
            t0 = time.perf_counter()
            # under a tether, as the one beside it: killed, this run leaves no make behind
            proc = start_tree(["make", *target.split()], cwd=clone)  # "test-any-p ANY_P=1"
            started.append(proc)
            proc.wait()
            if beside:
                name, other, took = beside
                if proc.returncode != 0 and other.poll() is None:
                    end_tree(other.pid)
                other.wait()
                beside = None
                if other.returncode != 0 and proc.returncode == 0:
                    lines.append(f"# make {name} failed there, so the run stopped\n")
                    break
                lines.append(f"make {name:12s} {took():7.0f} s\n")
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:  # the times of the targets before it are saved all the same
                lines.append(f"# make {target} failed there after {seconds:.0f} s, so the run stopped\n")
                break
            lines.append(f"make {target:12s} {seconds:7.0f} s\n")
            print(lines[-1], end="", flush=True)
            changed = subprocess.run(["git", "status", "--porcelain", "--", "benchmarks/results"], cwd=clone,
                                     capture_output=True, text=True, check=True).stdout.splitlines()
            for entry in changed:
                name = entry[3:].strip()
                shutil.copy2(clone / name, ROOT / name)
                print(f"copied back: {name}", flush=True)
    timed = [t for t in targets if any(line.startswith(f"make {t} ") for line in lines)]
    earlier = earlier_runs(OUT.read_text(), timed) if OUT.exists() else []
    OUT.write_text("".join(lines + earlier))
    if lines[-1].startswith("# make"):
        print(lines[-1].lstrip("# ").rstrip(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
