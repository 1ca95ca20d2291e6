"""The local launcher: the engines are the MPI ranks of one `mpiexec` on this machine.

`start(settings)` is what `dplab.start_cluster()` runs for launcher "mpiexec" (the default): a
`Cluster` handle (`dplab.cluster.handle`) driven by `MpiexecLauncher`.
"""
from __future__ import annotations

import os

from .handle import Cluster
from .launcher import engine_environment, ipp_cluster, wait_for_engines
from .network import loopback_interface, mpi_environment
from .settings import Settings


class MpiexecLauncher:
    """A `Launcher`: mpiexec starts p engines here; nothing holds them but mpiexec itself."""

    silent_after_s = 0.0  # the engines run here: their death is seen at once

    def ipp_cluster(self, settings: Settings, mpiexec: str):
        from traitlets.config import Config

        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [mpiexec]
        if "SLURM_JOB_ID" in os.environ:  # inside a SLURM job, MPICH would spread them over its nodes
            cfg.MPILauncher.mpi_args = ["-launcher", "fork"]
        # The engines run on this node: MPICH's network module listens on loopback only.
        cfg.MPILauncher.environment = {**mpi_environment(loopback_interface()),
                                       **engine_environment(settings.p, settings.threads)}
        return ipp_cluster("mpi", settings.p, cfg)

    def job_name(self, cluster_id: str) -> None:
        return None

    def wait_for_engines(self, cluster, client, settings: Settings) -> None:
        wait_for_engines(client, settings.p)

    def after_leaving(self, asked: bool) -> None:
        pass  # mpiexec ends with its ranks, which the handle reaps

    def after_stop(self, lost_nodes: list[str]) -> None:
        pass

    def files(self) -> set[str]:
        return set()

    def unreachable_nodes(self, hosts: list[str]) -> None:
        return None  # one machine: no node to lose

    def describe(self, settings: Settings) -> str:
        return f"{settings.p} MPI engines"


def start(settings: Settings, init_torch: bool = True) -> Cluster:
    """dplab.start_cluster(launcher="mpiexec"): stop this process's running cluster, start this one."""
    return Cluster(settings, MpiexecLauncher(), init_torch=init_torch)._start_alone()
