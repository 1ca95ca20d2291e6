"""The cluster's processes: find mpiexec and them, ask them to leave, reap them, remove what they leave.

Used by the cluster handle (`dplab.cluster.handle`) and the launchers, by the guardian that ends
a dead kernel's cluster (`dplab.cluster.guard`) and by MPI jobs (`dplab.cluster.jobs`).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable

from .errors import ClusterError


def find_mpiexec() -> str:
    """Return the path of mpiexec, looking beside this Python first."""
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join([here, os.environ.get("PATH", "")])
    exe = shutil.which("mpiexec", path=path)
    if exe is None:
        raise ClusterError(
            "mpiexec not found: run `make setup` (it installs the mpich wheel), "
            "or put the venv's bin/ on PATH"
        )
    return exe


def on_parent_death(sig: int) -> Callable[[], None]:
    """A preexec_fn for subprocess: the child gets `sig` when the process that started it ends,
    however it ends (SIGKILL included). Linux's prctl(PR_SET_PDEATHSIG)."""
    def arm() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # 1: PR_SET_PDEATHSIG
    return arm


def own_cluster_processes(cluster_id: str) -> list:
    """Our descendant processes that ipyparallel launched for this cluster."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def cluster_processes(cluster_id: str) -> list:
    """Every live process, whoever its parent, that ipyparallel launched for this cluster: they
    carry its id in IPP_CLUSTER_ID. Another user's processes cannot be read, and are skipped."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except psutil.Error:
            pass
    return alive(found)


def is_engine(proc) -> bool:
    """An engine or its nanny (the processes that hold a rank), not mpiexec or the controller."""
    try:
        return any(arg.startswith("ipyparallel.engine") for arg in proc.cmdline())
    except Exception:
        return False


def alive(procs: list) -> list:
    """Those of `procs` still running; a zombie (dead, not yet reaped by its parent) counts as gone."""
    import psutil

    running = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.Error:
            pass
    return running


def reap(procs: list, timeout: float) -> None:
    """Wait up to `timeout` s for processes to exit, then kill the rest and wait for them."""
    import psutil

    deadline = time.monotonic() + timeout
    while (running := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in running:
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 5
    while alive(running) and time.monotonic() < deadline:
        time.sleep(0.02)


def freeze(procs: list) -> None:
    """SIGSTOP the processes: a rank caught in MPICH's lazy set-up creates no shared-memory file
    between a look at what they hold (left_behind) and their end."""
    import signal

    import psutil

    for proc in procs:
        try:
            proc.send_signal(signal.SIGSTOP)
        except psutil.Error:
            pass


def end(procs: list, grace: float) -> None:
    """SIGTERM the processes, give them `grace` seconds to exit, then kill the rest (reap)."""
    import psutil

    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    reap(procs, timeout=grace)


def files_held_open(procs: list) -> set[str]:
    """MPICH's files that its processes hold open or mapped (a segment's file may be closed once
    mapped) and leave behind when killed: a shared-memory segment in /dev/shm and mpiexec's hwloc
    topology file in the temp folder."""
    def mpich(path: str) -> bool:
        return path.startswith("/dev/shm/mpich_shm_") or "hydra_hwloc_xmlfile_" in path

    found = set()
    for proc in procs:
        try:
            found.update(f.path for f in proc.open_files() if mpich(f.path))
            found.update(path for path in mapped_files(proc.pid) if mpich(path))
        except Exception:
            pass
    return found


def mapped_files(pid: int) -> set[str]:
    """The files process `pid` has mapped, from /proc/PID/maps: psutil's memory_maps() reads
    smaps, whose per-mapping counts cost ~0.1 s for each engine that imported torch."""
    found = set()
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.rstrip("\n").split(None, 5)  # address perms offset dev inode [path]
            if len(fields) == 6 and fields[5].startswith("/"):
                found.add(fields[5].removesuffix(" (deleted)"))
    return found


def left_behind(procs: list) -> set[str]:
    """What these processes leave when killed: MPICH's files (files_held_open) and each engine's
    ipykernel folder in the temp folder."""
    return files_held_open(procs) | {os.path.join(tempfile.gettempdir(), f"ipykernel_{p.pid}")
                                     for p in procs if is_engine(p)}


def unlink(path: str) -> None:
    """Remove a file if it is there."""
    try:
        os.unlink(path)
    except OSError:
        pass


def remove(paths) -> None:
    """Remove the files and folders that are there."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else unlink(path)


@contextlib.contextmanager
def remove_files_held_open(pid: int):
    """Remove, after the block (which kills them), the MPICH files that process `pid` and its
    descendants hold open."""
    import psutil

    try:
        proc = psutil.Process(pid)
        files = files_held_open([proc, *proc.children(recursive=True)])
    except psutil.Error:
        files = set()
    try:
        yield
    finally:
        for path in files:
            unlink(path)


def shut_down_politely(client, leave: Callable[[], None] | None, wait_s: float) -> bool:
    """Ask idle engines to run `leave` (leave the process group) and exit, waiting at most
    `wait_s` seconds. An engine busy with a task would not answer, so a client with tasks
    outstanding is not asked. True when the engines were asked."""
    if client is None or client.outstanding:
        return False

    def ask() -> None:
        try:
            if leave is not None:
                client[:].apply_sync(leave)
            client.shutdown(targets="all", block=True)
        except Exception:
            pass

    done = threading.Thread(target=ask, daemon=True)
    done.start()
    done.join(timeout=wait_s)
    return True
