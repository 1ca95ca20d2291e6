"""The local launcher: a cluster of ipyparallel engines that are the MPI ranks of one `mpiexec`.

`start(settings)` is what `dplab.start_cluster()` runs for launcher "mpiexec" (the default).
`Cluster` is the handle the labs hold; the SLURM launcher (`dplab.cluster.slurm`) is a
subclass of it. Where each rank waits when a cell cannot finish is the watch's business
(`dplab.cluster.watch`); the processes' bookkeeping is `dplab.cluster.processes`'. Each cluster
has a guardian (`dplab.cluster.guard`) that ends it if the kernel dies without stopping it.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import tempfile
import time

from . import engine, ipp
from .errors import ClusterError
from .guard import Guard
from .network import loopback_interface, mpi_environment
from .processes import (find_mpiexec, is_engine, left_behind, own_cluster_processes, reap, remove,
                        shut_down_politely)
from .settings import Settings
from .watch import WatchedView

START_TIMEOUT_S = 120
STOP_POLITE_S = 1.0  # healthy engines get this long to leave the process group; then they are killed


def engine_environment(p: int, threads: int | None) -> dict[str, str]:
    """Extra environment for the engines: passive OpenMP waiting when their threads outnumber the cores.

    An OpenMP thread that finds no work spins before it sleeps. When p ranks x threads exceed the
    cores, the spinning threads take the cores from the ones with work: a lab then runs many times
    slower (Lab 6 at 4 ranks x 2 threads on 2 cores: 11 min instead of 1). A value the user set wins.
    """
    if "OMP_WAIT_POLICY" in os.environ or p * (threads or 1) <= (os.cpu_count() or 1):
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


_running: "Cluster | None" = None  # the one cluster this process runs


class Cluster:
    """A running set of MPI-rank engines joined in one torch process group."""

    def __init__(self, settings: Settings, init_torch: bool = True):
        self.settings = settings
        self.init_torch = init_torch
        self.mpiexec: str | None = None  # found when it starts
        self._cluster = None
        self.client = None
        self.view = None
        self.engines_seconds = self.start_seconds = float("nan")
        self.ranks: list = []  # one dplab.cluster.engine.RankInfo per rank, in rank order, once joined
        self.lost_nodes: list[str] = []  # nodes that stopped answering (the watch sets it; see slurm.py)
        self.port: int | None = settings.port  # the rendezvous port actually used, once joined
        self._stacks: str | None = None  # folder where ranks dump their stacks (dplab.cluster.watch)
        self._leftovers: set[str] = set()  # files the engines leave behind when killed
        self._guard: Guard | None = None  # ends the cluster if this process dies without stopping it

    # -- life cycle ---------------------------------------------------------
    def start(self) -> "Cluster":
        """Launch the controller and engines, wait for all, join the process group."""
        self.mpiexec = find_mpiexec()  # before anything starts
        os.environ["PATH"] = os.pathsep.join([os.path.dirname(self.mpiexec), os.environ.get("PATH", "")])
        self._cluster = self._ipp_cluster()
        self._guard = Guard(self.cluster_id, job_name=self._job_name())  # before any process starts
        atexit.register(self.stop)
        try:
            t0 = time.perf_counter()
            self._cluster.start_cluster_sync()
            self.client = self._cluster.connect_client_sync()
            self._wait_for_engines()
            self.view = WatchedView(self, self.client, targets=sorted(self.client.ids))
            self.view.block = True
            self.engines_seconds = time.perf_counter() - t0
            self._leftovers = left_behind(own_cluster_processes(self.cluster_id))
            # ipyparallel's record of the engines, which it never removes
            self._leftovers.add(os.path.join(self._cluster.profile_dir, "log", f"engines{self.cluster_id}.json"))
            if self.init_torch:
                self._init_ranks()
            self._guard.remove_later(self._files())
            self._guard.wait_ready()
            self.start_seconds = time.perf_counter() - t0
            self._activate_magics()
        except BaseException:
            self.stop()
            raise
        return self

    def _ipp_cluster(self):
        """The ipyparallel cluster: engines started by mpiexec on this machine."""
        import ipyparallel
        from traitlets.config import Config

        s = self.settings
        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [self.mpiexec]
        if "SLURM_JOB_ID" in os.environ:  # inside a SLURM job, MPICH would spread them over its nodes
            cfg.MPILauncher.mpi_args = ["-launcher", "fork"]
        # The engines run on this node: MPICH's network module listens on loopback only.
        cfg.MPILauncher.environment = {**mpi_environment(loopback_interface()),
                                       **engine_environment(s.p, s.threads)}
        return ipyparallel.Cluster(
            engines="mpi",
            n=s.p,  # ipyparallel's name for the engine count
            log_level=40,
            controller_args=["--HeartMonitor.period=500"],
            config=cfg,
            shutdown_atexit=False,  # our own atexit hook stops engines before the controller
        )

    def _job_name(self) -> str | None:
        """The name of the batch job that holds the engines, for the guardian to cancel; None here."""
        return None

    def _files(self) -> set[str]:
        """Every file the cluster leaves when its processes are killed: ours (`_remove_leftovers`),
        and ipyparallel's (its record of the cluster, the launchers' logs), which it removes on stop."""
        c = self._cluster
        logs = [getattr(launcher, "output_file", None) for launcher in [c.controller, *c.engines.values()]]
        return {*self._leftovers, self._stacks, c.cluster_file, *logs} - {None, ""}

    def _wait_for_engines(self) -> None:
        """Wait until all p engines have connected."""
        # interactive=False: no progress bar, so notebook output is the same every run
        self.client.wait_for_engines(self.settings.p, timeout=START_TIMEOUT_S, interactive=False)

    def _init_ranks(self) -> None:
        """Apply engine.setup on every engine, keep the records, and bind ENGINE_NAMES on each engine."""
        s = self.settings
        self._stacks = tempfile.mkdtemp(prefix="dplab-stacks-")
        joining = self.view.apply_async(engine.setup, s, self._stacks)
        try:
            infos = joining.get(timeout=START_TIMEOUT_S)
        except TimeoutError:
            where = joining.where([r for r, state in joining.states().items() if state is None])
            raise ClusterError(
                f"the ranks did not join the process group in {START_TIMEOUT_S} s; "
                + "; ".join(f"rank {r}: {w.text}" for r, w in sorted(where.items()))
                + ". The cluster was stopped: check the network settings and start again"
            ) from None
        for engine_id, info in zip(self.view.targets, infos):
            if engine_id != info.rank:  # the labs index pulled lists by rank
                raise ClusterError(f"engine {engine_id} is MPI rank {info.rank}: restart the cluster")
            self.client[engine_id].push(info.engine_names(), block=True)
        self.ranks = infos
        self.lost_nodes = []
        self.port = infos[0].port

    def _activate_magics(self) -> None:
        """Make %%px block and print every rank's output at once, in rank order."""
        try:
            from IPython import get_ipython
        except ImportError:
            return
        ip = get_ipython()
        if ip is None:
            return
        self.view.activate()
        ip.run_line_magic("pxconfig", "--block --no-stream --progress-after -1")

    def stop(self) -> None:
        """Shut down engines, controller and mpiexec; safe to call twice.

        Healthy engines leave the process group and exit; busy or stuck ones are killed.
        """
        global _running
        atexit.unregister(self.stop)
        if _running is self:
            _running = None
        cluster, client = self._cluster, self.client
        self._cluster = self.client = self.view = None
        procs = own_cluster_processes(cluster.cluster_id) if cluster is not None else []
        self._leave_politely(client)
        # Engines have left the process group (or are stuck): kill them rather than wait seconds for
        # their interpreters to wind down. mpiexec ends the job when its ranks are gone, and the
        # controller stops on SIGTERM.
        reap([p for p in procs if is_engine(p)], timeout=0)
        if client is not None:
            try:
                ipp.fail_unfinished(client)
            except Exception:
                pass
            client.close()
        if cluster is not None:
            try:
                cluster.stop_cluster_sync()
            except Exception:
                pass
        reap(procs, timeout=2)
        self._remove_leftovers()
        if self._guard is not None:  # last: until here, the kernel's death still ends the cluster
            self._guard.dismiss()
            self._guard = None

    def _leave_politely(self, client) -> bool:
        """Ask idle engines to leave the process group and exit (STOP_POLITE_S at most); True
        when they were asked (a busy engine would not answer)."""
        leave = engine.finalize if self.init_torch and self.ranks else None
        return shut_down_politely(client, leave, STOP_POLITE_S)

    def _remove_leftovers(self) -> None:
        """Files the cluster's processes leave when they do not exit on their own (MPICH's, and
        ipykernel's cell folders), ipyparallel's engine record, and the stack dumps."""
        remove(self._leftovers | ({self._stacks} if self._stacks else set()))
        self._leftovers, self._stacks = set(), None

    def restart(self) -> "Cluster":
        """Stop this cluster if it still runs, and start the same one again: same p, backend, device."""
        self.stop()
        return self._start_alone()

    def _start_alone(self) -> "Cluster":
        """Stop the cluster this process started before, if any, then start this one in its place."""
        global _running
        if _running is not None:
            _running.stop()
        self.start()
        _running = self
        return self

    # -- looking into running ranks (for dplab.cluster.watch) ----------------------
    def signal(self, ranks: list[int], sig: str) -> None:
        """Send signal `sig` (a name such as "SIGINT") to the engines of `ranks`."""
        here = socket.gethostname()
        local = {i.rank: i.pid for i in self.ranks if i.host == here}
        for rank in ranks:
            try:
                if rank in local:
                    os.kill(local[rank], getattr(signal, sig))
                elif self.client is not None:
                    self.client.send_signal(sig, targets=[rank], block=False)
            except Exception:  # gone already: nothing to signal
                pass

    #: Seconds after a rank's node goes silent before the controller counts its engines gone
    #: (0: the engines run here, and their death is seen at once).
    silent_after_s = 0.0

    def unreachable_nodes(self) -> list[str] | None:
        """The ranks' nodes that do not answer now; None: this cluster cannot tell."""
        return None

    def cpu_seconds(self, ranks: list[int]) -> dict[int, float]:
        """CPU seconds each rank's process has used so far, for the ranks on this node."""
        import psutil

        here = socket.gethostname()
        found = {}
        for info in self.ranks:
            if info.rank in ranks and info.host == here:
                try:
                    t = psutil.Process(info.pid).cpu_times()
                    found[info.rank] = t.user + t.system
                except psutil.Error:
                    pass
        return found

    def stacks(self, ranks: list[int], timeout: float = 1.5) -> dict[int, str]:
        """Each rank's Python stacks, which it dumps on SIGUSR1 even when blocked in C; "" if unread."""
        if not self._stacks or not ranks:
            return {r: "" for r in ranks}
        files = {r: engine.stack_file(self._stacks, r) for r in ranks}
        before = {r: _size(f) for r, f in files.items()}
        self.signal(ranks, "SIGUSR1")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_size(f) <= before[r] for r, f in files.items()):
            time.sleep(0.05)
        time.sleep(0.1)  # let the last dump finish writing
        found = {}
        for rank, path in files.items():
            try:
                with open(path) as f:
                    f.seek(before[rank])
                    found[rank] = f.read()
            except OSError:
                found[rank] = ""
        return found

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self.client is not None

    @property
    def cluster_id(self) -> str | None:
        """The ipyparallel cluster id (it appears in every engine's command line)."""
        return self._cluster.cluster_id if self._cluster is not None else None

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        s = self.settings
        state = "running" if self.running else "stopped"
        return f"<Cluster {state}: {s.p} MPI engines, backend={s.backend}, device={s.device}>"


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def start(settings: Settings, init_torch: bool = True) -> Cluster:
    """dplab.start_cluster(launcher="mpiexec"): stop this process's running cluster, start this one."""
    return Cluster(settings, init_torch=init_torch)._start_alone()
