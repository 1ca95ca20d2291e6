"""What a launcher does for the cluster handle (`dplab.cluster.handle.Cluster`), and what they share.

A launcher starts the engines somewhere and knows how they end there; the handle owns
everything else (the guardian, the process group, `%%px`, stopping, the watch's questions).
Three implement `Launcher`: `local.MpiexecLauncher` (mpiexec on this machine),
`slurm.SlurmLauncher` (an sbatch job of its own) and `slurm.AllocationLauncher` (a step of the
notebook's own job). They share the helpers below rather than inherit from one another.
"""
from __future__ import annotations

import os
from typing import Protocol

from .settings import Settings

START_TIMEOUT_S = 120  # for the engines to connect, and for the ranks to join the process group


class Launcher(Protocol):
    """How one kind of launch starts engines and ends them; the handle calls each in turn."""

    #: Seconds after a rank's node goes silent before the controller counts its engines gone
    #: (0: the engines run here, and their death is seen at once).
    silent_after_s: float

    def ipp_cluster(self, settings: Settings, mpiexec: str):
        """The ipyparallel.Cluster that starts the controller here and p engines (use `ipp_cluster`)."""

    def job_name(self, cluster_id: str) -> str | None:
        """The batch job that holds the engines, for the guardian to cancel by name; None: none."""

    def wait_for_engines(self, cluster, client, settings: Settings) -> None:
        """Return once p engines have connected; raise ClusterError when they never will."""

    def after_leaving(self, asked: bool) -> None:
        """After idle engines were asked to leave (asked: whether they were): wait, bounded,
        for what held them (mpiexec, the job) to end by itself."""

    def after_stop(self, lost_nodes: list[str]) -> None:
        """After the handle stopped every process it knows: end what is left (a SLURM job), and
        remove the launcher's own files. Called once per start; bounded."""

    def files(self) -> set[str]:
        """Files and folders of the launcher's own, for the guardian to remove if the kernel dies."""

    def unreachable_nodes(self, hosts: list[str]) -> list[str] | None:
        """Which of the ranks' nodes do not answer now; None: this launcher cannot tell."""

    def describe(self, settings: Settings) -> str:
        """One line: where the engines run ("4 MPI engines on 2 SLURM nodes")."""


def engine_environment(p: int, threads: int | None) -> dict[str, str]:
    """Extra environment for the engines: passive OpenMP waiting when their threads outnumber the cores.

    An OpenMP thread that finds no work spins before it sleeps. When p ranks x threads exceed the
    cores, the spinning threads take the cores from the ones with work: a lab then runs many times
    slower (Lab 6 at 4 ranks x 2 threads on 2 cores: 11 min instead of 1). A value the user set wins.
    """
    if "OMP_WAIT_POLICY" in os.environ or p * (threads or 1) <= (os.cpu_count() or 1):
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def ipp_cluster(engines: str, p: int, config, heartbeat: tuple[int, int] | None = None,
                controller_ip: str | None = None):
    """The ipyparallel.Cluster every launcher builds: p engines of ipyparallel's launcher
    `engines` ("mpi", "slurm"), quiet, stopped by the handle (not at exit), and with a heartbeat
    (period ms, misses) for engines on other nodes, whose death is seen only by their silence."""
    import ipyparallel

    beat = ([f"--HeartMonitor.period={heartbeat[0]}",
             f"--HeartMonitor.max_heartmonitor_misses={heartbeat[1]}"] if heartbeat
            else ["--HeartMonitor.period=500"])
    where = {"controller_ip": controller_ip} if controller_ip else {}
    # delay=0: the engines start with the controller, not a fixed second after it (ipyparallel's
    # default, a sixth of a start on a 2-core box); each engine waits for the controller's
    # connection file itself (its wait_for_url_file, 10 s, polled every 0.1 s)
    return ipyparallel.Cluster(engines=engines, n=p, log_level=40, controller_args=beat, config=config,
                               shutdown_atexit=False, delay=0, **where)  # the handle's atexit hook stops it


def wait_for_engines(client, p: int) -> None:
    """Wait until p engines have connected (START_TIMEOUT_S at most)."""
    # interactive=False: no progress bar, so notebook output is the same every run
    client.wait_for_engines(p, timeout=START_TIMEOUT_S, interactive=False)
