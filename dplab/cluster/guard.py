"""The guardian: a dead kernel's cluster goes away by itself.

ipyparallel starts the controller and mpiexec in sessions of their own, and a kernel killed by
SIGKILL or SIGTERM runs no atexit hook: left alone, its cluster would run forever. So
`Cluster.start` first starts a guardian, a small process in a session of its own (a signal to
the kernel's process group does not reach it), whose stdin is the read end of a pipe whose
write end only the kernel holds: `os.pipe` makes both ends non-inheritable, and subprocess closes
every other descriptor in the processes the kernel starts. Through the pipe the kernel names the
files to remove; `Guard.dismiss` (the end of `Cluster.stop`) says "done", and the guardian exits.

When the pipe ends without "done" (the kernel died, by whatever signal), or the guardian's
parent is no longer the kernel (it died while a process it forked still holds the pipe), the
guardian records the MPICH files the cluster's processes hold open, cancels the cluster's SLURM
job if it has one (by its name, among this user's jobs), ends every process that carries the
cluster's id in IPP_CLUSTER_ID (the controller and its schedulers, mpiexec, hydra's proxies,
the engines: the engines are stopped before the look, so that none makes a file after it, then
killed; the others get SIGTERM, then SIGKILL `GRACE_S` later), removes the files, and exits. Another
learner's cluster has another id, and another user's processes cannot be read.
"""
from __future__ import annotations

import json
import os
import pwd
import select
import subprocess
import sys
import time

from .errors import ClusterError
from .processes import cluster_processes, end, freeze, is_engine, left_behind, reap, remove

GRACE_S = 1.0  # the controller removes its connection files on SIGTERM; what is left then is killed
POLL_S = 1.0  # how often the guardian checks that its parent is still the kernel
READY_S = 30  # for the guardian to start (it imports dplab, hence ipyparallel)
LOOKS = 3  # a dying mpiexec may just have started a rank: look again after each kill
SLURM_S = 30  # for scancel and squeue to answer, and for squeue to stop listing the job
READY = b"dplab guardian ready\n"
# What the guardian runs: dplab/__init__ would run anyway, so `-m` would import this module twice.
MAIN = "import sys; from dplab.cluster.guard import main; main(sys.argv[1:])"
# The folder that holds the dplab package: the guardian imports it from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Guard:
    """The kernel's end of a cluster's guardian."""

    def __init__(self, cluster_id: str, job_name: str | None = None):
        read, write = os.pipe()
        args = [cluster_id, str(os.getpid())] + ([job_name] if job_name else [])
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", MAIN, *args],
                stdin=read, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=ROOT,  # `-c` puts the working folder first on sys.path: dplab is found there
                start_new_session=True)  # out of the kernel's process group, and of its signals
        finally:
            os.close(read)  # the guardian holds the only read end
        self._pipe = os.fdopen(write, "w")

    def remove_later(self, paths) -> None:
        """Name files and folders for the guardian to remove if the kernel dies."""
        self._send(["remove", *sorted(p for p in paths if p)])

    def wait_ready(self) -> None:
        """Raise ClusterError unless the guardian has started watching (at most READY_S)."""
        out, said = self.process.stdout, b""
        if out is None or out.closed:
            return
        deadline = time.monotonic() + READY_S
        while READY not in said and select.select([out], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(out.fileno(), 4096)
            if not chunk:  # it exited
                break
            said += chunk
        out.close()
        if READY not in said:
            raise ClusterError("the cluster's guardian (which ends the cluster if this kernel dies) did "
                               f"not start: {said.decode(errors='replace')[-2000:] or 'no output'}")

    def dismiss(self) -> None:
        """The cluster was stopped: the guardian exits and touches nothing. Safe to call twice."""
        if self._pipe is None:
            return
        self._send(["done"])
        try:
            self._pipe.close()
        except OSError:
            pass
        self._pipe = None
        if self.process.stdout is not None:
            self.process.stdout.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _send(self, message: list) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(json.dumps(message) + "\n")
            self._pipe.flush()
        except OSError:  # the guardian is gone (someone killed it): nobody to tell
            pass


# -- the guardian process ------------------------------------------------------------------

def main(argv: list[str]) -> None:
    """The guardian: python -c MAIN CLUSTER_ID KERNEL_PID [SLURM_JOB_NAME], stdin the kernel's pipe.
    Ends the process when done."""
    cluster_id, kernel, job_name = argv[0], int(argv[1]), (argv[2] if len(argv) > 2 else None)
    try:
        os.write(1, READY)
    except OSError:  # the kernel died before reading it
        pass
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the kernel reads nothing more from us
    os.dup2(quiet, 2)
    paths = wait_for_the_kernel(kernel)
    if paths is not None:
        end_cluster(cluster_id, job_name, paths)
    # Nothing to flush (stdout and stderr are /dev/null): skip the interpreter's teardown of
    # ipyparallel's and zmq's modules, a few tenths of a second that Guard.dismiss (and so
    # every Cluster.stop) would wait for.
    os._exit(0)


def wait_for_the_kernel(kernel: int) -> list[str] | None:
    """Block until the kernel dies (then: the paths it named) or says "done" (then: None)."""
    paths, pending = [], b""
    while True:
        if not select.select([0], [], [], POLL_S)[0]:
            if os.getppid() != kernel:  # orphaned: the kernel died, a process it forked holds the pipe
                return paths
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # nobody holds the write end any more
            return paths
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            try:
                kind, *args = json.loads(line)
            except (TypeError, ValueError):  # a line cut short when the kernel died
                continue
            if kind == "done":
                return None
            paths.extend(args)


def end_cluster(cluster_id: str, job_name: str | None, paths: list[str]) -> None:
    """End every process of the cluster and its SLURM job; remove its files."""
    procs = cluster_processes(cluster_id)
    # MPICH's files, read before anyone is killed, with the engines stopped: a rank that made a
    # segment after the look left it (a clean clone's make test, once). Stopped, they would sit
    # out SIGTERM's grace, so they are killed at once; the controller, its schedulers and
    # mpiexec get SIGTERM's grace (the controller removes its connection files).
    engines = [p for p in procs if is_engine(p)]
    freeze(engines)
    paths = [*paths, *left_behind(procs)]
    if job_name:
        _slurm("scancel", job_name)
    reap(engines, 0)
    procs = cluster_processes(cluster_id)
    for _ in range(LOOKS):
        if not procs:
            break
        end(procs, GRACE_S)
        procs = cluster_processes(cluster_id)
    if job_name:
        deadline = time.monotonic() + SLURM_S
        while _slurm("squeue", job_name) and time.monotonic() < deadline:
            _slurm("scancel", job_name)  # again: it may have been pending, or its nodes slow to answer
            time.sleep(0.5)
    remove(paths)


def _slurm(command: str, job_name: str) -> str:
    """Run scancel or squeue on this user's jobs of that name; squeue's output ("" on any error)."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no name (some containers): SLURM takes the number
        user = str(os.getuid())
    args = [command, f"--name={job_name}", f"--user={user}"]
    if command == "squeue":
        args += ["-h", "-o", "%i"]  # the job ids only: "" once it is gone
    try:
        return subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=SLURM_S).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
