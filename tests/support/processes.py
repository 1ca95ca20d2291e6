"""The processes a test started, waiting for them to exit, finding a cluster's or a
notebook's processes (psutil), and MPICH's files a test left in /dev/shm."""
import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil


def descendants() -> set[int]:
    """PIDs of every live process this test process started, at any depth."""
    alive = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_until_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait for the given PIDs to exit; return those still alive."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return {p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE}


def outlived_sigkill(parent: subprocess.Popen, up, what: str, timeout: float = 60.0,
                     gone_s: float = 3.0) -> set[int]:
    """Wait until up() (the parent's tree has started), SIGKILL the parent, and return the PIDs
    of its descendants at that moment still alive gone_s later (zombies count as gone). Those
    are killed, so nothing is left either way. AssertionError, naming `what`, if up() stays
    false past `timeout`."""
    try:
        deadline = time.monotonic() + timeout
        while not up():
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.1)
        tree = psutil.Process(parent.pid).children(recursive=True)
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    alive = wait_until_gone({p.pid for p in tree}, timeout=gone_s)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


#: A Python process that imports mpi4py.MPI without mpiexec (an MPICH singleton), says
#: "up <its PID>" and lives 5 minutes, holding /dev/shm/<singleton_segment(its PID)>.
SINGLETON = "import os, time\nfrom mpi4py import MPI\nprint('up', os.getpid(), flush=True)\ntime.sleep(300)\n"


def singleton_segment(pid: int) -> str:
    """The name of the file in /dev/shm that MPICH makes for a singleton: its PID, in hex."""
    return f"mpich_shm_{pid:x}_0"


def mpich_segments() -> set[str]:
    """The names of MPICH's shared-memory files in /dev/shm now."""
    return {f for f in os.listdir("/dev/shm") if f.startswith("mpich")}


SETTLE_S = 10.0  # how long a file no live process maps may stay before it counts as left


def segments_left(before: set[str], settle_s: float = SETTLE_S) -> set[str]:
    """MPICH's files in /dev/shm that appeared since `before` (mpich_segments()), that no live
    process maps, and that are still there `settle_s` seconds later: left by a process that
    ended without finalising MPI, and that nobody removes.

    - A file a live process still maps is another program's: any Python process on the machine
      that imports mpi4py.MPI without mpiexec (a singleton: a page test, a second learner's
      kernel) makes /dev/shm/mpich_shm_<its PID in hex>_0 while it lives, and removes it at exit.
    - A file that goes within `settle_s` is another program's too: the launching chapter, built
      beside the kit's tests, kills an MPI job's ranks to show the file they leave, and then
      removes it. A test's own leak stays: nothing else removes it."""
    from dplab.cluster.processes import files_held_open

    deadline = time.monotonic() + settle_s
    while True:
        new = mpich_segments() - before
        if new:
            held = {os.path.basename(path) for path in files_held_open(list(psutil.process_iter()))}
            new = {f for f in new - held if os.path.exists(f"/dev/shm/{f}")}
        if not new or time.monotonic() >= deadline:
            return new
        time.sleep(0.2)


def running_command(cmdline: list[str]) -> list[psutil.Process]:
    """Every process on the machine whose command line is exactly `cmdline`."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == cmdline]


def named(procs) -> list[str]:
    """'pid name' of each of `procs` still alive."""
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {proc.name()}")
        except psutil.Error:
            pass
    return out


def cluster_process_names(cluster_id: str) -> list[str]:
    """'pid name' of every live process ipyparallel launched for this cluster (the kit's own
    finder, dplab.cluster.processes.cluster_processes, reads IPP_CLUSTER_ID)."""
    from dplab.cluster.processes import cluster_processes

    return named(cluster_processes(cluster_id))


LAB_PARTS = re.compile(r"ipengine|ipyparallel|hydra_pmi_proxy|mpiexec|ipykernel_launcher|dplab\.cluster")


def lab_processes() -> dict[int, str]:
    """Every live process of a notebook kernel, an engine cluster or its guardian, on the whole
    machine, by PID (a grader's run may start them under another account)."""
    found = {}
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if LAB_PARTS.search(cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found[p.info["pid"]] = cmd[:120]
    return found


def open_paths(pid: str = "[0-9]*") -> set[str]:
    """What the open file descriptors of the processes `pid` names point to, folders included
    (psutil's open_files lists regular files only): every process by default, "self" for this one."""
    found = set()
    for link in Path("/proc").glob(f"{pid}/fd/*"):
        with contextlib.suppress(OSError):  # the process or descriptor went meanwhile
            found.add(os.readlink(link))
    return found


def stack_folders() -> set[str]:
    """dplab's stack folders in /tmp now (dplab.cluster.handle.held_folder): the nodes' /tmp,
    which the private SLURM cluster's epilog cleans."""
    return {str(folder) for folder in Path("/tmp").glob("dplab-stacks-*")}


def unheld(folders: set[str]) -> list[str]:
    """Those of `folders` still there that no process holds open (a file in them, or the folder
    itself): as the epilog tells a live cluster's folder from a dead one's."""
    targets = open_paths()
    return sorted(f for f in folders if os.path.isdir(f)
                  and not any(t == f or t.startswith(f + "/") for t in targets))
