"""MPI jobs from Python: launch a script under mpiexec (benchmarks, tests), and a benchmark's main.

One port policy: `run_job` picks a free port and hands it to every rank in DPLAB_PORT, where
`Settings.for_job()` reads it for `dplab.cluster.engine.setup`. A job launched some other way
(srun, a hand-typed mpiexec) has no DPLAB_PORT unless you set one, and then rank 0 picks a
free port itself and tells the others over MPI.

The job runs on this node, so MPICH's network module listens on loopback only
(`dplab.cluster.network.mpi_environment`), as do the rendezvous store and Gloo
(`dplab.cluster.engine.setup`); mpiexec's own control port cannot be bound (README, Security).
A job launched some other way gets loopback from `setup` for the store and Gloo, but not for
MPICH, which starts before it: set UCX_NET_DEVICES yourself.

A benchmark is one call (`main`): it parses the benchmark's options, and either starts the
job (`mpiexec -n --ranks` of the same script with the same arguments) or, as one of its ranks,
resolves the settings, joins the process group, runs the benchmark, and leaves:

    def add_arguments(ap):                 # the benchmark's own options
        ap.add_argument("--batch", type=int, default=64)

    def run(args, job):                    # on every rank; job.settings, .rank, .world_size, .device
        ...

    if __name__ == "__main__":
        sys.exit(jobs.main(__file__, run, ranks=2, add_arguments=add_arguments))
"""
from __future__ import annotations

import argparse
import ast
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .engine import RankInfo, finalize, setup
from .errors import BackendError, ClusterError
from .network import free_port, loopback_interface, mpi_environment
from .processes import find_mpiexec, remove_files_held_open
from .settings import Settings, in_mpi_job, to_environment


def run_job(script: str | os.PathLike, p: int, args=(), *, timeout: float, capture: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `mpiexec -n p python script *args` on a fresh free port; kill the whole job after timeout s.

    With capture=False the job's output goes straight to this process's stdout and stderr.
    """
    env = dict(os.environ if env is None else env, **to_environment(port=free_port()))
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


@dataclass(frozen=True)
class Job:
    """One rank of a benchmark's job: the settings it resolved and where it sits."""

    settings: Settings
    info: RankInfo

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def local_rank(self) -> int:
        return self.info.local_rank

    @property
    def device(self):
        """This rank's torch.device."""
        return self.info.device


def join(**settings) -> Job:
    """On every rank of an MPI job: resolve the settings (Settings.for_job) and join the process group."""
    resolved = Settings.for_job(**settings)
    return Job(resolved, setup(resolved))


def leave() -> None:
    """On every rank, at the end of a job: wait for the others, then leave the process group."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
    finalize()


def _description(script: str | os.PathLike) -> str | None:
    """The first line of the script's docstring."""
    try:
        doc = ast.get_docstring(ast.parse(Path(script).read_text()))
    except (OSError, SyntaxError):
        return None
    return doc.splitlines()[0] if doc else None


def main(script: str | os.PathLike, run: Callable[[argparse.Namespace, Job], None], *,
         ranks: int | tuple[int, ...], add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
         check: Callable[[argparse.Namespace], str | None] | None = None, repeats: int = 15, warmup: int = 3,
         launch: Callable[[argparse.Namespace, Callable[[int], subprocess.CompletedProcess]], int] | None = None,
         settings: dict | None = None, argv: list[str] | None = None, timeout: float = 1800) -> int:
    """A benchmark's whole main(): parse its options, then be one rank or start the ranks.

    Options: the script's own (add_arguments(ap); check(args) returns what is wrong, or None),
    then --ranks (default `ranks`; a tuple takes several), --repeats and --warmup
    (dplab.timing.timing_arguments), all checked before anything starts.

    Inside an MPI job (mpiexec, srun): join() with `settings` as overrides, run(args, job), then
    leave() (barrier, leave the process group); returns 0. A rank that raises ends the job.

    Otherwise: check the settings of the job to come (Settings.for_job, so a bad DPLAB_* fails
    here), then run `mpiexec -n --ranks` of the script with the same arguments, its output going
    to this process's, and return its exit status. With `launch`, return launch(args, start)
    instead, where start(p) runs the job on p ranks with the same arguments and returns its
    CompletedProcess, output captured (a benchmark that runs several jobs and reads their output).
    """
    from ..timing import timing_arguments

    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=_description(script))
    if add_arguments is not None:
        add_arguments(ap)
    args = timing_arguments(ap, ranks, argv, repeats=repeats, warmup=warmup)
    problem = check(args) if check is not None else None
    if problem:
        ap.error(problem)
    overrides = dict(settings or {})
    if in_mpi_job():
        job = join(**overrides)
        run(args, job)
        leave()
        return 0
    try:  # a bad DPLAB_* fails here, before any job starts
        for p in args.ranks if isinstance(args.ranks, list) else [args.ranks]:
            Settings.for_job(**{**overrides, "p": p})
    except (ClusterError, BackendError) as e:
        raise SystemExit(f"{Path(script).name}: {e}") from None
    if launch is not None:
        return launch(args, lambda p: run_job(script, p, argv, timeout=timeout))
    return run_job(script, args.ranks, argv, timeout=timeout, capture=False).returncode
