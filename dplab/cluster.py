"""Start and stop a cluster of ipyparallel engines that are MPI ranks.

Settings come from arguments first, then these environment variables:

    DPLAB_ENGINES      number of engines (MPI ranks), default 4
    DPLAB_BACKEND      torch.distributed backend: gloo, nccl or mpi; default automatic
    DPLAB_DEVICE       cpu or cuda; default automatic
    DPLAB_PORT         rendezvous port (MASTER_PORT); default: rank 0's OS picks a free one
    DPLAB_THREADS      torch threads per rank; default: the node's cores shared among its ranks
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass

from . import backend as _backend
from . import engine as _engine

DEFAULT_ENGINES = 4
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15


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


@dataclass(frozen=True)
class Settings:
    """Everything decided before any process starts."""

    p: int  # ranks: one engine each
    backend: str
    device: str
    port: int | None  # None: rank 0 binds port 0 and the OS picks a free one
    mpiexec: str
    threads: int | None = None  # None: cores // ranks on the node


def resolve(
    p: int | None = None,
    backend: str | None = None,
    device: str | None = None,
    port: int | None = None,
    threads: int | None = None,
) -> Settings:
    """Check every request and decide the settings; raises before anything starts."""
    count = _engine_count(p)
    n_threads = _thread_count(threads)
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
    return Settings(count, choice.backend, choice.device, port, mpiexec, n_threads)


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


def _reap(procs: list, timeout: float = 10.0) -> None:
    """Wait for processes to exit; kill any still alive after `timeout` seconds."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)


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

    # -- life cycle ---------------------------------------------------------
    def start(self) -> "Cluster":
        """Launch the controller and engines, wait for all, join the process group."""
        import ipyparallel as ipp
        from traitlets.config import Config

        s = self.settings
        os.environ["PATH"] = os.pathsep.join([os.path.dirname(s.mpiexec), os.environ.get("PATH", "")])
        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [s.mpiexec]
        self._cluster = ipp.Cluster(
            engines="mpi",
            n=s.p,  # ipyparallel's name for the engine count
            log_level=40,
            controller_args=["--HeartMonitor.period=500"],
            config=cfg,
            shutdown_atexit=False,  # our own atexit hook stops engines before the controller
        )
        atexit.register(self.stop)
        try:
            t0 = time.perf_counter()
            self._cluster.start_cluster_sync()
            self.client = self._cluster.connect_client_sync()
            # interactive=False: no progress bar, so notebook output is the same every run
            self.client.wait_for_engines(s.p, timeout=START_TIMEOUT_S, interactive=False)
            self.view = self.client[:]
            self.view.block = True
            self.engines_seconds = time.perf_counter() - t0
            if self.init_torch:
                self._init_ranks()
            self.start_seconds = time.perf_counter() - t0
            self._activate_magics()
        except BaseException:
            self.stop()
            raise
        return self

    def _init_ranks(self) -> None:
        """Apply engine.setup on every engine, keep the records, and bind ENGINE_NAMES on each engine."""
        s = self.settings
        infos = self.view.apply_sync(_engine.setup, s.backend, s.device, s.port, s.threads)
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
        """Shut down engines, controller and mpiexec; safe to call twice."""
        global _running
        atexit.unregister(self.stop)
        if _running is self:
            _running = None
        cluster, client = self._cluster, self.client
        self._cluster = self.client = self.view = None
        procs = _own_cluster_processes(cluster.cluster_id) if cluster is not None else []
        if client is not None:
            # A dead engine never answers: bound the polite part, then stop_cluster kills the rest.
            done = threading.Thread(target=_shutdown_engines, args=(client, self.init_torch), daemon=True)
            done.start()
            done.join(timeout=STOP_TIMEOUT_S)
            client.close()
        if cluster is not None:
            try:
                cluster.stop_cluster_sync()
            except Exception:
                pass
        _reap(procs)

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


def start_cluster(
    p: int | None = None,
    backend: str | None = None,
    device: str | None = None,
    port: int | None = None,
    init_torch: bool = True,
    threads: int | None = None,
) -> Cluster:
    """Start p engines that are MPI ranks, join them in a torch process group, and return the handle.

    Any cluster this process started before is stopped first. Use the handle as a
    context manager, or call ``.stop()``; it also stops at interpreter exit.
    """
    global _running
    settings = resolve(p, backend, device, port, threads)
    if _running is not None:
        _running.stop()
    cluster = Cluster(settings, init_torch=init_torch).start()
    _running = cluster
    return cluster
