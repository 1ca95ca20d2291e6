"""`start_cluster`: resolve the settings once, then hand them to the launcher they name."""
from __future__ import annotations

from . import local, slurm
from .local import Cluster
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
    return START[resolved.launcher](resolved, init_torch=init_torch)


start_cluster.__doc__ += "\n" + "\n".join("    " + line for line in describe().splitlines()) + "\n"
