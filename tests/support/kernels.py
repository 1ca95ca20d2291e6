"""Learners for tests: real ipykernels started by jupyter_client (as JupyterLab starts one), each
running a cluster, and what is left of a cluster after its kernel died (psutil)."""
from __future__ import annotations

import glob
import os
import tempfile
import time

import psutil

from dplab.cluster.processes import cluster_processes


def run(kc, code: str, timeout: float = 180) -> str:
    """Execute `code` in the kernel; what it printed. AssertionError with the traceback if it raised."""
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


def running(procs: list) -> list:
    """Those of `procs` still running (a zombie has exited)."""
    found = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def wait_until_ended(procs: list, timeout: float) -> list:
    """Wait until none of `procs` runs (polling: a zombie whose parent is gone may never be
    reaped, so waiting on it would block); those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while (left := running(procs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def describe(proc) -> str:
    """PID and command line, for a message."""
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:100]}"
    except psutil.Error:
        return f"{proc.pid} (just exited)"


def processes_of(cluster_id: str) -> list:
    """Every running process that carries this cluster's id (ipyparallel sets IPP_CLUSTER_ID):
    the guardian's own finder, which test_kernel_death's stand-in processes check by their PIDs."""
    return running(cluster_processes(cluster_id))


def mpich_files(procs: list) -> set[str]:
    """MPICH's shared-memory files in /dev/shm that these processes hold open."""
    found = set()
    for proc in procs:
        try:
            found.update(f.path for f in proc.open_files() if f.path.startswith("/dev/shm/mpich"))
        except psutil.Error:
            pass
    return found


class Watched:
    """A kernel's process and, once `record` ran, the cluster it started: what that cluster is
    made of, and what is left of it after the kernel died."""

    def __init__(self, kernel: psutil.Process):
        self.kernel = kernel
        self.cluster_id, self.processes, self.files, self.guardians, self.profile = None, [], set(), [], None

    def record(self, cluster_id: str) -> None:
        """Record the running cluster `cluster_id` of this kernel: its processes, MPICH's files,
        its guardian (a child of the kernel) and its ipyparallel profile."""
        self.cluster_id = cluster_id
        self.processes = processes_of(self.cluster_id)
        assert self.processes, f"no process carries the cluster id {self.cluster_id}"
        self.files = mpich_files(self.processes)
        self.guardians = [p for p in self.kernel.children() if "dplab.cluster.guard" in " ".join(p.cmdline())]
        assert len(self.guardians) == 1, self.kernel.children()
        self.profile = self.processes[0].environ()["IPP_PROFILE_DIR"]

    def left(self) -> list[str]:
        """What is left of the cluster: its processes, its guardian, MPICH's files, ipyparallel's
        files that name it, the engines' ipykernel folders."""
        procs = running(list({p.pid: p for p in self.processes + processes_of(self.cluster_id)}.values()))
        found = [describe(p) for p in procs + running(self.guardians)]
        found += sorted(f for f in self.files if os.path.exists(f))
        found += sorted(glob.glob(os.path.join(glob.escape(self.profile), "**", f"*{self.cluster_id}*"),
                                  recursive=True))
        found += [d for p in self.processes if os.path.exists(d := os.path.join(tempfile.gettempdir(),
                                                                                f"ipykernel_{p.pid}"))]
        return found

    def gone_within(self, limit: float) -> float:
        """Seconds until nothing of the cluster is left; AssertionError naming what is left at `limit`."""
        t0 = time.monotonic()
        while (left := self.left()) and time.monotonic() - t0 < limit:
            time.sleep(0.1)
        assert left == [], f"{limit} s after the kernel died, left: {left}"
        return time.monotonic() - t0


class Learner(Watched):
    """A kernel started by jupyter_client and, once `start` ran, the cluster it started."""

    def __init__(self, env: dict[str, str] | None = None):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", **({"env": env} if env else {}))
        super().__init__(psutil.Process(int(run(self.kc, "import os; print(os.getpid())"))))

    def start(self, call: str, timeout: float = 180) -> None:
        """Run `c = CALL` in the kernel (a dplab.start_cluster call) and record what it started."""
        self.record(run(self.kc, f"import dplab\nc = {call}\nprint(c.cluster_id)", timeout).split()[-1])

    def close(self) -> None:
        """Shut the kernel down and kill whatever is left of its cluster, whatever happened."""
        self.kc.stop_channels()
        try:
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass
        wait_until_ended(self.guardians, timeout=10)  # a guardian at work: let it finish
        procs = running(self.processes + self.guardians + (processes_of(self.cluster_id) if self.cluster_id else []))
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        wait_until_ended(procs, timeout=5)
        for path in self.files:
            try:
                os.unlink(path)
            except OSError:
                pass
