"""Run a script under torchrun from a notebook or test: bounded, watchable, and nothing left behind.

    with TorchrunJob("chapters/ddp_train.py", nproc=4, args=[...], max_restarts=1, timeout=300) as job:
        for seconds, line in job.lines():      # rank 0's stdout, as it comes
            ...
            job.worker(1).kill()               # SIGKILL the worker whose RANK is 1
    job.returncode, job.seconds, job.stderr

Leaving the `with` block on an error, or passing the timeout, kills torchrun's agent and every
worker, so no process outlives the job. The job's temporary files (torchrun's log folder, made
under TMPDIR) go into a folder of the job's own, removed when the `with` block ends.

The job runs on this node: the workers' Gloo and NCCL sockets listen on loopback only. torchrun's
rendezvous stores (the agent's, and rank 0's with TORCH_DISABLE_SHARE_RDZV_TCP_STORE) listen on
every interface while the job runs: torchrun has no option to bind them (README, Security).
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                  "TORCHELASTIC_RESTART_COUNT")


def torchrun_env(threads: int = 1) -> dict[str, str]:
    """This environment, fit to start torchrun: the venv first on PATH, no rank variables of ours."""
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS=str(threads),
               LOGLEVEL="INFO",  # the agent says when it restarts the workers at INFO
               # A fresh rendezvous store for every restart: with the shared one, restarted Gloo
               # workers can find the dead workers' addresses and fail (pytorch/pytorch#135712).
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    from .network import loopback_interface

    lo = loopback_interface()  # the workers' collectives stay on this node
    env.update(GLOO_SOCKET_IFNAME=lo, NCCL_SOCKET_IFNAME=lo)
    for key in RANK_VARIABLES:
        env.pop(key, None)
    return env


class TorchrunJob:
    """`torchrun --standalone --nproc-per-node N --max-restarts=R script args`; env: extra variables."""

    def __init__(self, script, nproc: int, args=(), *, max_restarts: int = 0, timeout: float = 300,
                 env: dict[str, str] | None = None):
        self.cmd = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone",
                    "--nproc-per-node", str(nproc), f"--max-restarts={max_restarts}", str(script), *map(str, args)]
        self.timeout = timeout
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.returncode: int | None = None
        self.seconds = float("nan")  # wall time from start to exit
        self._lines: queue.Queue = queue.Queue()
        self._t0 = time.monotonic()
        self._deadline = self._t0 + timeout
        # torchrun makes a torchelastic_* log folder under TMPDIR and leaves it: make it here
        self.tmp = tempfile.mkdtemp(prefix="dplab-torchrun-")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**torchrun_env(), "TMPDIR": self.tmp, **(env or {})},
                                     start_new_session=True)
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout, True), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr, False), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe, into: list, is_stdout: bool) -> None:
        for line in pipe:
            into.append(line.rstrip("\n"))
            if is_stdout:
                self._lines.put((time.monotonic() - self._t0, into[-1]))
        if is_stdout:
            self._lines.put(None)

    def lines(self):
        """(seconds since the start, line) for each stdout line until the job closes its output."""
        while True:
            try:
                item = self._lines.get(timeout=max(0.0, self._deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise TimeoutError(f"torchrun ran past {self.timeout:g} s and was killed") from None
            if item is None:
                return
            yield item

    def worker(self, rank: int):
        """The worker process (a psutil.Process) whose environment says RANK=rank."""
        import psutil

        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank):
                    return child
            except psutil.Error:
                continue
        raise LookupError(f"torchrun has no worker with RANK={rank} now")

    def wait(self) -> int:
        """Wait for torchrun to exit (killing it at the deadline); return its exit code."""
        try:
            self.returncode = self.proc.wait(timeout=max(0.1, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"torchrun ran past {self.timeout:g} s and was killed") from None
        self.seconds = time.monotonic() - self._t0
        for reader in self._readers:
            reader.join(timeout=5)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the agent's session and every worker (torchrun starts each in a session of its own)."""
        import psutil

        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for proc in family:
            try:
                proc.kill()
            except psutil.Error:
                pass
        self.proc.wait(timeout=10)
        psutil.wait_procs(family, timeout=5)

    def __enter__(self) -> "TorchrunJob":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None and self.proc.poll() is None:
                self.wait()
        finally:
            if self.proc.poll() is None or exc[0] is not None:
                self.kill()
            shutil.rmtree(self.tmp, ignore_errors=True)
