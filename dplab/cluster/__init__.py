"""The cluster's plumbing: how the labs' engines, and MPI jobs, are started, joined and watched.

    settings   the run settings, read once from arguments and DPLAB_*; the backend policy
    start      start_cluster: resolve the settings, hand them to the launcher they name
    handle     the Cluster handle the labs hold: life cycle, ranks, guardian, %%px
    launcher   the Launcher interface, and the helpers the launchers share
    local      the mpiexec launcher (engines on this machine)
    slurm      the SLURM launchers (an sbatch job of their own; a step of the notebook's job)
    engine     the engine side: setup() joins a rank to the process group; RankInfo
    watch      ranks stuck after another failed: WatchedView, StuckRanksError
    flight     the Flight Recorder: each rank's buffer saved when ranks are stuck; torch's analyzer
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
