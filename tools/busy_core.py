"""Run a command while one other process keeps one core busy the whole time (a learner's
neighbour on a shared node): `python tools/busy_core.py CMD [ARG ...]`; exits with CMD's status.

The busy process is pure Python arithmetic, a child of this process, which then becomes the
command (exec, same PID). It exits when its parent does, even when the parent is killed with
SIGKILL, so it never outlives the command it stood beside; nothing else is left in between.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    sum(range(20000))\n"


def start() -> subprocess.Popen:
    """The busy process, a child of this one."""
    return subprocess.Popen([sys.executable, "-c", BURNER])


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python tools/busy_core.py CMD [ARG ...]: the command to run beside a busy core")
    if shutil.which(argv[0]) is None:
        sys.exit(f"busy_core.py: {argv[0]!r} is not a command: give the command to run and its arguments")
    start()
    os.execvp(argv[0], argv)  # the burner's parent is now the command itself


if __name__ == "__main__":
    main(sys.argv[1:])
