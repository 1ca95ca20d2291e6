"""The cluster handle the labs hold: a running set of MPI-rank engines in one torch process group.

`Cluster` knows no launcher. It owns the life cycle (start, stop, restart), the ranks, the
guardian (`dplab.cluster.guard`, which ends the cluster if the kernel dies without stopping
it), the `%%px` set-up, and what the watch (`dplab.cluster.watch`) asks of a running cluster:
signals, stacks, CPU seconds. Where and how the engines start is its `Launcher`'s business
(`dplab.cluster.launcher`); the processes' bookkeeping is `dplab.cluster.processes`'.
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
from .launcher import START_TIMEOUT_S, Launcher
from .processes import find_mpiexec, is_engine, left_behind, own_cluster_processes, reap, remove, shut_down_politely
from .settings import Settings
from .watch import WatchedView

STOP_POLITE_S = 1.0  # healthy engines get this long to leave the process group; then they are killed


_running: "Cluster | None" = None  # the one cluster this process runs


class Cluster:
    """A running set of MPI-rank engines joined in one torch process group."""

    def __init__(self, settings: Settings, launcher: Launcher, init_torch: bool = True):
        self.settings = settings
        self.launcher = launcher
        self.init_torch = init_torch
        self.mpiexec: str | None = None  # found when it starts
        self._cluster = None
        self.client = None
        self.view = None
        self.engines_seconds = self.start_seconds = float("nan")
        self.ranks: list = []  # one dplab.cluster.engine.RankInfo per rank, in rank order, once joined
        self.lost_nodes: list[str] = []  # nodes that stopped answering (the watch marks them)
        self.port: int | None = settings.port  # the rendezvous port actually used, once joined
        self.stacks_folder: str | None = None  # where ranks dump their stacks (dplab.cluster.watch)
        self._stacks_held: int | None = None  # a descriptor of that folder, open while the cluster lives
        self._leftovers: set[str] = set()  # files the engines leave behind when killed
        self._guard: Guard | None = None  # ends the cluster if this process dies without stopping it

    # -- life cycle ---------------------------------------------------------
    def start(self) -> "Cluster":
        """Launch the controller and engines, wait for all, join the process group."""
        self.mpiexec = find_mpiexec()  # before anything starts
        os.environ["PATH"] = os.pathsep.join([os.path.dirname(self.mpiexec), os.environ.get("PATH", "")])
        self._cluster = self.launcher.ipp_cluster(self.settings, self.mpiexec)
        # before any process starts
        self._guard = Guard(self.cluster_id, job_name=self.launcher.job_name(self.cluster_id))
        atexit.register(self.stop)
        try:
            t0 = time.perf_counter()
            self._cluster.start_cluster_sync()
            self.client = self._cluster.connect_client_sync()
            self.launcher.wait_for_engines(self._cluster, self.client, self.settings)
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

    def _files(self) -> set[str]:
        """Every file the cluster leaves when its processes are killed: ours (`_remove_leftovers`),
        ipyparallel's (its record of the cluster, the launchers' logs), which it removes on stop,
        and the launcher's own."""
        c = self._cluster
        logs = [getattr(launcher, "output_file", None) for launcher in [c.controller, *c.engines.values()]]
        return {*self._leftovers, self.stacks_folder, c.cluster_file, *logs, *self.launcher.files()} - {None, ""}

    def _init_ranks(self) -> None:
        """Apply engine.setup on every engine, keep the records, and bind ENGINE_NAMES on each engine."""
        s = self.settings
        self.stacks_folder, self._stacks_held = held_folder("dplab-stacks-")
        joining = self.view.apply_async(engine.setup, s, self.stacks_folder)
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
        # MPICH may open a shared-memory file after the start's look: look again before killing
        self._leftovers |= left_behind(procs)
        leave = engine.finalize if self.init_torch and self.ranks else None
        self.launcher.after_leaving(shut_down_politely(client, leave, STOP_POLITE_S))
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
        if cluster is not None:
            self.launcher.after_stop(self.lost_nodes)
        if self._guard is not None:  # last: until here, the kernel's death still ends the cluster
            self._guard.dismiss()
            self._guard = None

    def _remove_leftovers(self) -> None:
        """Files the cluster's processes leave when they do not exit on their own (MPICH's, and
        ipykernel's cell folders), ipyparallel's engine record, and the stack dumps."""
        if self._stacks_held is not None:
            os.close(self._stacks_held)
            self._stacks_held = None
        remove(self._leftovers | ({self.stacks_folder} if self.stacks_folder else set()))
        self._leftovers, self.stacks_folder = set(), None

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

    @property
    def silent_after_s(self) -> float:
        """Seconds a silent rank may stay silent before the controller counts it gone (launcher's)."""
        return self.launcher.silent_after_s

    def unreachable_nodes(self) -> list[str] | None:
        """The ranks' nodes that do not answer now; None: the launcher cannot tell."""
        return self.launcher.unreachable_nodes(sorted({info.host for info in self.ranks}))

    def mark_lost(self, nodes: list[str]) -> None:
        """Nodes that stopped answering (the watch's finding): stopping waits for none of them."""
        self.lost_nodes = list(nodes)

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
        if not self.stacks_folder or not ranks:
            return {r: "" for r in ranks}
        files = {r: engine.stack_file(self.stacks_folder, r) for r in ranks}
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
        return f"<Cluster {state}: {self.launcher.describe(s)}, backend={s.backend}, device={s.device}>"


def held_folder(prefix: str) -> tuple[str, int]:
    """A new folder in the temporary folder, and a descriptor of it, open until the caller closes it.

    A SLURM epilog (a centre's; tools/slurm/start.sh's) removes the folders that no process holds
    once a job has ended; a job that SLURM ends takes this kernel and its guardian with it, before
    either can remove the folder, and the open descriptor tells the epilog whose folder is live.
    """
    for _ in range(3):
        path = tempfile.mkdtemp(prefix=prefix)
        try:
            return path, os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # an epilog removed it in between: make another
            continue
    raise ClusterError(f"{tempfile.gettempdir()}/{prefix}* folders vanish as soon as they are made: "
                       "does a clean-up job remove them? Set TMPDIR to a folder of your own")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
