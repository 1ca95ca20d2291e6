"""Start and stop a cluster of ipyparallel engines that are MPI ranks.

Settings come from arguments first, then these environment variables:

    DPLAB_ENGINES      number of engines (MPI ranks), default 4
    DPLAB_BACKEND      torch.distributed backend: gloo, nccl or mpi; default automatic
    DPLAB_DEVICE       cpu or cuda; default automatic
    DPLAB_PORT         rendezvous port (MASTER_PORT); default: rank 0's OS picks a free one
    DPLAB_THREADS      torch threads per rank; default: the node's cores shared among its ranks
    DPLAB_TIMEOUT      seconds a collective waits before it raises; default 120
    DPLAB_DEBUG        TORCH_DISTRIBUTED_DEBUG on the engines: OFF, INFO or DETAIL; default unset
    DPLAB_STUCK_AFTER  seconds after a rank fails (or returns) before ranks still blocked in a
                       collective count as stuck and the cluster is stopped; default 3
    DPLAB_IFACE        the network interface that the nodes share, for ranks on several nodes;
                       on one node everything listens on loopback; default unset
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from . import backend as _backend
from . import engine as _engine

DEFAULT_ENGINES = 4
START_TIMEOUT_S = 120
STOP_POLITE_S = 1.0  # healthy engines get this long to leave the process group; then they are killed
STUCK_AFTER_S = 3.0


class ClusterError(RuntimeError):
    """The cluster cannot be started as asked."""


def max_engines() -> int:
    """The largest engine count we accept: four ranks per core, at least 8."""
    return max(8, 4 * (os.cpu_count() or 1))


def find_mpiexec() -> str:
    """Return the path of mpiexec, looking beside this Python first."""
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join([here, os.environ.get("PATH", "")])
    exe = shutil.which("mpiexec", path=path)
    if exe is None:
        raise ClusterError(
            "mpiexec not found: run `make setup` (it installs the mpich wheel), "
            "or put the venv's bin/ on PATH"
        )
    return exe


def _engine_count(p: int | str | None) -> int:
    """Validate the engine count from the argument or DPLAB_ENGINES."""
    raw = p if p is not None else os.environ.get("DPLAB_ENGINES", DEFAULT_ENGINES)
    try:
        count = int(raw)
        if isinstance(raw, float) and raw != count:
            raise ValueError
    except (TypeError, ValueError):
        raise ClusterError(f"engine count must be a whole number, got {raw!r}: set p= or DPLAB_ENGINES") from None
    cap = max_engines()
    if not 1 <= count <= cap:
        raise ClusterError(
            f"engine count {count} is outside 1..{cap} (four per core on this {os.cpu_count()}-core machine): "
            "set p= or DPLAB_ENGINES to a value in that range"
        )
    return count


def _thread_count(threads: int | str | None) -> int | None:
    """Validate the per-rank torch thread count from the argument or DPLAB_THREADS."""
    raw = threads if threads is not None else os.environ.get("DPLAB_THREADS") or None
    if raw is None:
        return None
    try:
        count = int(raw)
    except (TypeError, ValueError):
        count = 0
    if count < 1 or str(count) != str(raw).strip():
        raise ClusterError(
            f"thread count must be a whole number >= 1, got {raw!r}: fix threads= or DPLAB_THREADS, "
            "or unset it to share the cores among the ranks"
        )
    return count


def _seconds(name: str, raw, default: float | None, lo: float, hi: float) -> float | None:
    """Validate a number of seconds from an argument or the environment variable `name`."""
    raw = raw if raw is not None else os.environ.get(name) or None
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not lo <= value <= hi:
        raise ClusterError(f"{name.removeprefix('DPLAB_').lower()} must be a number of seconds in {lo:g}..{hi:g}, "
                           f"got {raw!r}: fix the argument or {name}, or unset it")
    return value


def _debug_level(raw) -> str | None:
    raw = raw if raw is not None else os.environ.get("DPLAB_DEBUG") or None
    if raw is None:
        return None
    level = str(raw).upper()
    if level not in _engine.DEBUG_LEVELS:
        raise ClusterError(f"debug must be one of {', '.join(_engine.DEBUG_LEVELS)}, got {raw!r}: "
                           "fix debug= or DPLAB_DEBUG, or unset it")
    return level


def _interface(raw: str | None) -> str | None:
    """Validate the network interface from the argument or DPLAB_IFACE: it must exist here and have an address."""
    name = raw if raw is not None else _backend.job_interface()
    if name is None:
        return None
    try:
        _backend.interface_address(name)
    except _backend.InterfaceError as e:
        raise ClusterError(str(e)) from None
    return name


def engine_environment(p: int, threads: int | None) -> dict[str, str]:
    """Extra environment for the engines: passive OpenMP waiting when their threads outnumber the cores.

    An OpenMP thread that finds no work spins before it sleeps. When p ranks x threads exceed the
    cores, the spinning threads take the cores from the ones with work: a lab then runs many times
    slower (Lab 6 at 4 ranks x 2 threads on 2 cores: 11 min instead of 1). A value the user set wins.
    """
    if "OMP_WAIT_POLICY" in os.environ or p * (threads or 1) <= (os.cpu_count() or 1):
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass(frozen=True)
class Settings:
    """Everything decided before any process starts."""

    p: int  # ranks: one engine each
    backend: str
    device: str
    port: int | None  # None: rank 0 binds port 0 and the OS picks a free one
    mpiexec: str
    threads: int | None = None  # None: cores // ranks on the node
    timeout: float | None = None  # a collective's timeout in seconds; None: engine.TIMEOUT_S
    debug: str | None = None  # TORCH_DISTRIBUTED_DEBUG on the engines
    stuck_after: float = STUCK_AFTER_S  # see dplab.failures
    iface: str | None = None  # the interface the nodes share; on one node the ranks use loopback


def resolve(
    p: int | None = None,
    backend: str | None = None,
    device: str | None = None,
    port: int | None = None,
    threads: int | None = None,
    timeout: float | None = None,
    debug: str | None = None,
    stuck_after: float | None = None,
    iface: str | None = None,
) -> Settings:
    """Check every request and decide the settings; raises before anything starts."""
    count = _engine_count(p)
    iface = _interface(iface)
    n_threads = _thread_count(threads)
    timeout = _seconds("DPLAB_TIMEOUT", timeout, None, 1, 24 * 3600)
    stuck_after = _seconds("DPLAB_STUCK_AFTER", stuck_after, STUCK_AFTER_S, 0.5, 3600)
    debug = _debug_level(debug)
    mpiexec = find_mpiexec()
    backend = backend or os.environ.get("DPLAB_BACKEND") or None
    device = device or os.environ.get("DPLAB_DEVICE") or None
    if backend == "auto":
        backend = None
    if device == "auto":
        device = None
    n_gpus = 0 if device == "cpu" and backend in (None, "gloo") else _backend.count_gpus()
    choice = _backend.choose_backend(count, n_gpus, backend, device)
    if port is None:
        try:
            port = _backend.job_port()
        except ValueError as e:
            raise ClusterError(str(e)) from None
    if port is not None:
        try:
            port = int(port)
        except ValueError:
            raise ClusterError(f"port must be a number, got {port!r}: fix port= or DPLAB_PORT, or unset it") from None
        _backend.check_port_free(port)
    return Settings(count, choice.backend, choice.device, port, mpiexec, n_threads, timeout, debug, stuck_after, iface)


_running: "Cluster | None" = None


def _own_cluster_processes(cluster_id: str) -> list:
    """Our descendant processes that ipyparallel launched for this cluster."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _is_engine(proc) -> bool:
    """An engine or its nanny (the processes that hold a rank), not mpiexec or the controller."""
    try:
        return any(arg.startswith("ipyparallel.engine") for arg in proc.cmdline())
    except Exception:
        return False


def _alive(procs: list) -> list:
    """Those of `procs` still running; a zombie (dead, not yet reaped by its parent) counts as gone."""
    import psutil

    alive = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def _reap(procs: list, timeout: float) -> None:
    """Wait up to `timeout` s for processes to exit, then kill the rest and wait for them."""
    import psutil

    deadline = time.monotonic() + timeout
    while (alive := _alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 5
    while _alive(alive) and time.monotonic() < deadline:
        time.sleep(0.02)


def _files_held_open(procs: list) -> set[str]:
    """MPICH's files that its processes hold open and leave behind when killed: a shared-memory
    segment in /dev/shm and mpiexec's hwloc topology file in the temp folder."""
    found = set()
    for proc in procs:
        try:
            found.update(f.path for f in proc.open_files()
                         if f.path.startswith("/dev/shm/mpich_shm_") or "hydra_hwloc_xmlfile_" in f.path)
        except Exception:
            pass
    return found


def _fail_unfinished(client) -> None:
    """End every task still waiting on a killed engine with an EngineError, as ipyparallel does
    when an engine dies, so that no AsyncResult (or %%px's display of it) waits forever."""
    try:
        for engine_id, uuid in list(client._engines.items()):
            client._handle_stranded_msgs(engine_id, uuid)
    except Exception:
        pass


@contextlib.contextmanager
def remove_files_held_open(pid: int):
    """Remove, after the block (which kills them), the MPICH files that process `pid` and its
    descendants hold open."""
    import psutil

    try:
        proc = psutil.Process(pid)
        files = _files_held_open([proc, *proc.children(recursive=True)])
    except psutil.Error:
        files = set()
    try:
        yield
    finally:
        for path in files:
            _unlink(path)


def _shutdown_engines(client, finalize: bool) -> None:
    """Leave the process group, then ask every engine to exit."""
    try:
        if finalize:
            client[:].apply_sync(_engine.finalize)
        client.shutdown(targets="all", block=True)
    except Exception:
        pass


class Cluster:
    """A running set of MPI-rank engines joined in one torch process group."""

    def __init__(self, settings: Settings, init_torch: bool = True):
        self.settings = settings
        self.init_torch = init_torch
        self._cluster = None
        self.client = None
        self.view = None
        self.engines_seconds = self.start_seconds = float("nan")
        self.ranks: list = []  # one dplab.engine.RankInfo per rank, in rank order, once joined
        self.port: int | None = settings.port  # the rendezvous port actually used, once joined
        self._stacks: str | None = None  # folder where ranks dump their stacks (dplab.failures)
        self._leftovers: set[str] = set()  # files the engines leave behind when killed

    # -- life cycle ---------------------------------------------------------
    def start(self) -> "Cluster":
        """Launch the controller and engines, wait for all, join the process group."""
        from .failures import WatchedView

        s = self.settings
        os.environ["PATH"] = os.pathsep.join([os.path.dirname(s.mpiexec), os.environ.get("PATH", "")])
        self._cluster = self._ipp_cluster()
        atexit.register(self.stop)
        try:
            t0 = time.perf_counter()
            self._cluster.start_cluster_sync()
            self.client = self._cluster.connect_client_sync()
            self._wait_for_engines()
            self.view = WatchedView(self, self.client, targets=sorted(self.client.ids))
            self.view.block = True
            self.engines_seconds = time.perf_counter() - t0
            procs = _own_cluster_processes(self.cluster_id)
            self._leftovers = _files_held_open(procs)
            self._leftovers.update(os.path.join(tempfile.gettempdir(), f"ipykernel_{p.pid}")
                                   for p in procs if _is_engine(p))
            # ipyparallel's record of the engines, which it never removes
            self._leftovers.add(os.path.join(self._cluster.profile_dir, "log", f"engines{self.cluster_id}.json"))
            if self.init_torch:
                self._init_ranks()
            self.start_seconds = time.perf_counter() - t0
            self._activate_magics()
        except BaseException:
            self.stop()
            raise
        return self

    def _ipp_cluster(self):
        """The ipyparallel cluster: engines started by mpiexec on this machine."""
        import ipyparallel as ipp
        from traitlets.config import Config

        s = self.settings
        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [s.mpiexec]
        # The engines run on this node: MPICH's network module listens on loopback only.
        cfg.MPILauncher.environment = {**_backend.mpi_environment(_backend.loopback_interface()),
                                       **engine_environment(s.p, s.threads)}
        return ipp.Cluster(
            engines="mpi",
            n=s.p,  # ipyparallel's name for the engine count
            log_level=40,
            controller_args=["--HeartMonitor.period=500"],
            config=cfg,
            shutdown_atexit=False,  # our own atexit hook stops engines before the controller
        )

    def _wait_for_engines(self) -> None:
        """Wait until all p engines have connected."""
        # interactive=False: no progress bar, so notebook output is the same every run
        self.client.wait_for_engines(self.settings.p, timeout=START_TIMEOUT_S, interactive=False)

    def _init_ranks(self) -> None:
        """Apply engine.setup on every engine, keep the records, and bind ENGINE_NAMES on each engine."""
        s = self.settings
        self._stacks = tempfile.mkdtemp(prefix="dplab-stacks-")
        joining = self.view.apply_async(_engine.setup, s.backend, s.device, s.port, s.threads, s.timeout, s.debug,
                                        self._stacks, s.iface)
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
        procs = _own_cluster_processes(cluster.cluster_id) if cluster is not None else []
        polite = client is not None and not client.outstanding  # a busy engine would not answer
        if polite:
            done = threading.Thread(target=_shutdown_engines, args=(client, self.init_torch and bool(self.ranks)),
                                    daemon=True)
            done.start()
            done.join(timeout=STOP_POLITE_S)
        # Engines have left the process group (or are stuck): kill them rather than wait seconds for
        # their interpreters to wind down. mpiexec ends the job when its ranks are gone, and the
        # controller stops on SIGTERM.
        _reap([p for p in procs if _is_engine(p)], timeout=0)
        if client is not None:
            _fail_unfinished(client)
            client.close()
        if cluster is not None:
            try:
                cluster.stop_cluster_sync()
            except Exception:
                pass
        _reap(procs, timeout=2)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Files the cluster's processes leave when they do not exit on their own (MPICH's, and
        ipykernel's cell folders), ipyparallel's engine record, and the stack dumps."""
        for path in self._leftovers:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else _unlink(path)
        if self._stacks:
            shutil.rmtree(self._stacks, ignore_errors=True)
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

    # -- looking into running ranks (for dplab.failures) ----------------------
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
        files = {r: _engine.stack_file(self._stacks, r) for r in ranks}
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


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def start_cluster(
    p: int | None = None,
    backend: str | None = None,
    device: str | None = None,
    port: int | None = None,
    init_torch: bool = True,
    threads: int | None = None,
    timeout: float | None = None,
    debug: str | None = None,
    stuck_after: float | None = None,
    iface: str | None = None,
    launcher: str | None = None,
    nodes: int | None = None,
    partition: str | None = None,
) -> Cluster:
    """Start p engines that are MPI ranks, join them in a torch process group, and return the handle.

    launcher: "mpiexec" (default, this machine) or "slurm" (an sbatch job over `nodes` nodes of
    `partition`; see dplab.slurm); DPLAB_LAUNCHER, DPLAB_NODES and DPLAB_PARTITION set them too.

    timeout: seconds a collective waits before it raises. debug: TORCH_DISTRIBUTED_DEBUG on the
    engines ("DETAIL" checks that all ranks call the same collective on the same shapes).
    stuck_after: seconds after a rank fails before blocked ranks count as stuck (dplab.failures).
    iface: the network interface the nodes share when ranks run on several nodes (DPLAB_IFACE);
    on one node the rendezvous store, Gloo and NCCL listen on loopback only.
    Any cluster this process started before is stopped first. Use the handle as a context
    manager, or call ``.stop()``; it also stops at interpreter exit.
    """
    from . import slurm

    if slurm.launcher_name(launcher) == "slurm":
        return slurm.start(p, backend, device, port, init_torch, threads, timeout, debug, stuck_after,
                           iface, nodes, partition)
    settings = resolve(p, backend, device, port, threads, timeout, debug, stuck_after, iface)
    return Cluster(settings, init_torch=init_torch)._start_alone()
