"""Launch a Python script as an MPI job from Python: one way, for benchmarks and tests.

One port policy: the launcher picks a free port and hands it to every rank in DPLAB_PORT,
where `job_port()` reads it for `dplab.engine.setup`. A job launched some other way (srun,
a hand-typed mpiexec) has no DPLAB_PORT unless you set one, and then rank 0 picks a free
port itself and tells the others over MPI.

The job runs on this node, so MPICH's network module listens on loopback only
(`dplab.backend.mpi_environment`), as do the rendezvous store and Gloo (`dplab.engine.setup`);
mpiexec's own control port cannot be bound (README, Security). A job launched some other way
gets loopback from `setup` for the store and Gloo, but not for MPICH, which starts before it:
set UCX_NET_DEVICES yourself.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .backend import free_port, job_port, loopback_interface, mpi_environment  # noqa: F401 (job_port: on ranks)
from .cluster import find_mpiexec, remove_files_held_open


def run_job(script: str | os.PathLike, p: int, args=(), *, timeout: float, capture: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `mpiexec -n p python script *args` on a fresh free port; kill the whole job after timeout s.

    With capture=False the job's output goes straight to this process's stdout and stderr.
    """
    env = dict(os.environ if env is None else env, DPLAB_PORT=str(free_port()))
    env.update(mpi_environment(loopback_interface()))
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    cmd = [find_mpiexec(), "-n", str(p), sys.executable, str(Path(script)), *map(str, args)]
    pipe = subprocess.PIPE if capture else None
    # A session of its own, so that a timeout kills mpiexec and every rank it started.
    proc = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with remove_files_held_open(proc.pid):  # MPICH leaves its files behind when killed
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise TimeoutError(f"mpiexec -n {p} {Path(script).name} did not finish in {timeout:g} s; "
                           "its processes were killed") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def launched_by_mpi() -> bool:
    """True when this process is one rank of an MPI job (mpiexec or srun)."""
    return any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"))


def launch_or_run(script: str | os.PathLike, ranks: int, run, args, timeout: float = 1800) -> int:
    """A benchmark's main: inside an MPI job, call run(args) on this rank; otherwise start
    `mpiexec -n ranks script` with this process's arguments and return its exit status."""
    if launched_by_mpi():
        run(args)
        return 0
    return run_job(script, ranks, sys.argv[1:], timeout=timeout, capture=False).returncode
