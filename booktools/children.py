"""Processes that never outlive the process that started them, even when it is killed with SIGKILL.

    start_leaf(cmd)   a process with no children of its own: the kernel sends it SIGKILL when its
                      parent ends (dplab.cluster.processes.on_parent_death)
    start_tree(cmd)   a command that starts others (pytest and its kernels, a learner and its
                      clusters): it runs under a tether, `python -m booktools.children CMD ...`,
                      which gets SIGTERM when its parent ends and then kills the whole tree
    end_tree(pid)     kill a process and everything it started, and reap them
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Callable

import psutil


def tied(sig: int) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when this process ends; a child whose parent is gone
    before that was armed exits at once."""
    from dplab.cluster.processes import on_parent_death

    parent, arm = os.getpid(), on_parent_death(sig)

    def tie() -> None:
        arm()
        if os.getppid() != parent:
            os._exit(1)
    return tie


def start_leaf(cmd: list[str], **popen) -> subprocess.Popen:
    """Start `cmd`, which starts nothing itself, so that it dies with this process."""
    return subprocess.Popen(cmd, preexec_fn=tied(signal.SIGKILL), **popen)


def start_tree(cmd: list[str], **popen) -> subprocess.Popen:
    """Start `cmd` under a tether, so that it and everything it starts die with this process."""
    return subprocess.Popen([sys.executable, "-m", "booktools.children", *cmd],
                            preexec_fn=tied(signal.SIGTERM), **popen)


def end_tree(pid: int) -> None:
    """Kill a process and everything it started, and reap them."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(tree, timeout=10)


def end_descendants() -> None:
    """Kill everything this process started, at any depth."""
    tree = psutil.Process().children(recursive=True)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(tree, timeout=10)


def follow(stream, on_line: Callable[[str], None]) -> threading.Thread:
    """A thread that hands each line of `stream` (a child's stdout) to on_line as it comes."""
    def read() -> None:
        for line in stream:
            on_line(line.rstrip("\n"))
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def tether(cmd: list[str]) -> int:
    """Run `cmd`; on SIGTERM or SIGINT (the parent ended: see start_tree), kill its whole tree
    and exit. Returns cmd's exit status."""
    def leave(sig, frame) -> None:
        # Once: the parent's death can signal twice (PR_SET_PDEATHSIG fires as each of its
        # threads ends), and a second call, run inside the first, would exit before the first
        # had killed everything: a child orphaned meanwhile by its parent's death outlived us.
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        end_descendants()
        os._exit(128 + sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, leave)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m booktools.children CMD [ARG ...]: run CMD, ending its whole tree "
                 "when this process's parent ends")
    # Armed here too, for a parent that is not start_tree (.ci/run's shell): SIGTERM when the
    # parent ends, even by SIGKILL; a parent gone before that leaves nothing to wait for.
    parent = os.getppid()
    from dplab.cluster.processes import on_parent_death
    on_parent_death(signal.SIGTERM)()
    if os.getppid() != parent:
        sys.exit(1)
    sys.exit(tether(sys.argv[1:]))
