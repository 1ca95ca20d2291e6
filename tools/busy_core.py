"""Run a command while one other process keeps one core busy the whole time (a learner's
neighbour on a shared node): `python tools/busy_core.py CMD [ARG ...]`; exits with CMD's status.

The busy process is pure Python arithmetic; it exits when its parent does, even when the parent
is killed with SIGKILL, so it never outlives the command it stood beside.
"""
from __future__ import annotations

import subprocess
import sys

BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    sum(range(20000))\n"


def start() -> subprocess.Popen:
    """The busy process, a child of this one."""
    return subprocess.Popen([sys.executable, "-c", BURNER])


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: python tools/busy_core.py CMD [ARG ...]: the command to run beside a busy core")
    burner = start()
    try:
        return subprocess.call(argv)
    finally:
        burner.kill()
        burner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
