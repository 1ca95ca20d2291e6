"""`start_cluster`: resolve the settings once, then hand them to the launcher they name."""
from __future__ import annotations

import warnings
from importlib import metadata

from ..compat import check_supported, supported_range
from . import local, slurm
from .errors import ClusterError
from .handle import Cluster
from .settings import LAUNCHERS, Settings, describe

#: Each launcher's start(settings, init_torch) -> Cluster; its name is listed in settings.LAUNCHERS.
START = {"mpiexec": local.start, "slurm": slurm.start, "allocation": slurm.start_in_allocation}


def start_cluster(p: int | None = None, *, init_torch: bool = True, **settings) -> Cluster:
    """Start p engines that are MPI ranks, join them in a torch process group, and return the handle.

    Every other keyword is a setting (below; an unknown one raises TypeError): arguments win
    over the DPLAB_* variables, which win over the defaults, and everything is checked before
    anything starts. launcher "mpiexec" starts the engines on this machine, "slurm" in an sbatch
    job over `nodes` nodes of `partition`, "allocation" in the SLURM job this notebook runs in
    (dplab.cluster.slurm). init_torch=False leaves out the
    process group. Any cluster this process started before is stopped first. Use the handle as a
    context manager, or call ``.stop()``; it also stops at interpreter exit.
    """
    resolved = Settings.resolve(p=p, **settings)
    check_torch(metadata.version("torch"))
    return START[resolved.launcher](resolved, init_torch=init_torch)


def check_torch(version: str) -> None:
    """Refuse a torch older than the book supports, before anything starts; warn on a newer one.

    Older ones fail later, and less clearly: 2.7.1's TCPStore cannot take the listening socket
    the kit hands it (dplab.cluster.engine.setup), so every lab stops at its first cell.
    """
    problem = check_supported(version)
    if problem is None:
        return
    if "newer" in problem:
        warnings.warn(problem, stacklevel=3)
        return
    raise ClusterError(f"{problem} (the labs need torch {supported_range()[0]} or newer)")


start_cluster.__doc__ += "\n" + "\n".join("    " + line for line in describe().splitlines()) + "\n"
