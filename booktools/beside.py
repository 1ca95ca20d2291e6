"""Run one command beside another, on a box whose cores the other leaves idle:

    python -m booktools.beside LOG -- CMD1 [ARG ...] -- CMD2 [ARG ...]

CMD1 runs in the background at the lowest CPU priority (nice 19: CMD2's bounded waits keep the
cores), its printout in LOG; CMD2 runs in the foreground. Both run under a tether
(booktools.children): they and all they start end with this process, even one killed with
SIGKILL. When CMD2 fails, CMD1 is ended and the status is CMD2's. Otherwise CMD1 is waited for;
if it failed, LOG is printed and the status is 1. Used by `make test` (the book beside the kit's
tests) and `.ci/run` (torch's releases beside `make test`, the grader's tests beside
`make test-slurm`).
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from booktools.children import end_tree, start_tree

USAGE = "usage: python -m booktools.beside LOG -- CMD1 [ARG ...] -- CMD2 [ARG ...]"


def parse(argv: list[str]) -> tuple[Path, list[str], list[str]]:
    """(LOG, CMD1, CMD2) from the command line; SystemExit with the usage when it is not that."""
    if len(argv) < 5 or argv[1] != "--" or argv[2:].count("--") != 1:
        raise SystemExit(USAGE)
    cut = argv.index("--", 2)
    beside, main = argv[2:cut], argv[cut + 1:]
    if not beside or not main:
        raise SystemExit(USAGE)
    return Path(argv[0]), beside, main


def start_background(cmd: list[str], **popen) -> subprocess.Popen:
    """Start `cmd` at the lowest CPU priority (nice 19) under a tether: it and all it starts end
    with this process."""
    return start_tree(["nice", "-n", "19", *cmd], **popen)


def run(log: Path, beside: list[str], main: list[str]) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        background = start_background(beside, stdout=out, stderr=subprocess.STDOUT)
    foreground = start_tree(main)

    def leave(sig, frame) -> None:  # a SIGTERM or SIGINT ends both trees, then this process
        for proc in (foreground, background):
            end_tree(proc.pid)
        sys.exit(128 + sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, leave)
    try:
        status = foreground.wait()
        if status != 0:
            return status  # the background is ended below
        if background.wait() != 0:
            sys.stdout.write(log.read_text(errors="replace"))
            print(f"{' '.join(beside)}: failed beside {' '.join(main)} (above, and in {log})", file=sys.stderr)
            return 1
        print(f"{' '.join(beside)}: passed beside {' '.join(main)} ({log})")
        return 0
    finally:
        if background.poll() is None:
            end_tree(background.pid)


if __name__ == "__main__":
    sys.exit(run(*parse(sys.argv[1:])))
