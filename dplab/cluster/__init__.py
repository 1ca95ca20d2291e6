"""The cluster's plumbing: how the labs' engines, and MPI jobs, are started, joined and watched.

    settings   the run settings, read once from arguments and DPLAB_*; the backend policy
    start      start_cluster: resolve the settings, hand them to the launcher they name
    local      the local launcher (mpiexec on this machine) and the Cluster handle
    slurm      the SLURM launcher (engines in an sbatch job), a Cluster subclass
    engine     the engine side: setup() joins a rank to the process group; RankInfo
    watch      ranks stuck after another failed: WatchedView, StuckRanksError
    ipp        the private ipyparallel internals the watch needs, in one place
    processes  the cluster's processes: polite shutdown, reaping, files left behind
    guard      the guardian: ends a dead kernel's cluster (processes, SLURM job, files)
    network    ports and network interfaces (loopback on one node)
    jobs       MPI jobs from Python: run_job, and main(), a benchmark's entry point
    torchrun   torchrun from a notebook, bounded (TorchrunJob)
    errors     ClusterError, BackendError, PortInUseError, InterfaceError

Nothing is imported here: import the module you need (`from dplab.cluster import engine`).
What the book's pages use (data, models, timing, plots, ...) sits beside this package, in dplab/.
"""
