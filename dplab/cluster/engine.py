"""Engine-side set-up: runs inside each MPI rank to join the torch process group.

`setup(settings)` is what the client applies on every engine (`Cluster.start`) and what a
script launched by mpiexec calls itself (`dplab.cluster.jobs.main`, tests), with the settings
of `dplab.cluster.settings`, whole. It returns one `RankInfo` per rank;
the client keeps them in `cluster.ranks`, and binds the names in `ENGINE_NAMES` in each
engine's namespace from that rank's record. Those names are the only ones the labs find
already defined on the engines:

    rank        this process's rank, 0 .. world_size - 1 (the engine id is the rank)
    world_size  p, the number of ranks
    local_rank  rank among the ranks on this node (picks the GPU)
    device      a torch.device: torch.device("cpu") or torch.device("cuda", local GPU index)
"""
from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, fields

from . import flight
from .errors import InterfaceError
from .network import interface_address, listen_socket, loopback_interface
from .settings import TIMEOUT_S, Settings, threads_per_rank


#: The names `Cluster` defines on every engine, from that rank's RankInfo.
ENGINE_NAMES = ("rank", "world_size", "local_rank", "device")


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: "torch.device"  # noqa: F821 - torch is imported on the engines, not by `import dplab`
    port: int  # the rendezvous (MASTER_PORT) of the process group
    host: str  # this rank's host name
    pid: int  # this rank's process id (the client signals it to read its stack)

    def engine_names(self) -> dict:
        """The values of ENGINE_NAMES for this rank."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in ENGINE_NAMES}


def _on_node(comm, mine):
    """(rank among the processes that share this node, how many they are, each one's `mine`)."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size(), node.allgather(mine)
    finally:
        node.Free()


def _listen_interface(hosts: list[str], iface: str | None) -> tuple[str | None, str | None, str | None]:
    """(interface, address, None) this rank listens on, or (None, None, a message saying why it cannot).

    Every rank on one node: loopback, whatever DPLAB_IFACE says, so nothing of the cluster is
    reachable from the network. Ranks on several nodes: the interface `iface` (DPLAB_IFACE) that
    the nodes share, which must be set and exist on every node.
    """
    try:
        if len(set(hosts)) == 1:
            return loopback_interface(), "127.0.0.1", None
        if iface is None:
            return None, None, (f"the ranks run on {len(set(hosts))} nodes and DPLAB_IFACE is unset: set DPLAB_IFACE "
                                "to the network interface the nodes share (for example ib0 or eth1)")
        return iface, interface_address(iface), None
    except InterfaceError as e:
        return None, None, str(e)


def visible_gpus() -> list[str]:
    """This process's GPUs, in torch's order, each named by what tells physical GPUs apart:
    its UUID (`torch.cuda.get_device_properties(i).uuid`), else its PCI bus id."""
    import torch

    names = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid = getattr(props, "uuid", None)
        names.append(str(uuid) if uuid is not None else f"pci {getattr(props, 'pci_bus_id', i)}")
    return names


def gpu_for(rank: int, local_rank: int, backend: str, node_gpus: list[list[str]]) -> tuple[int | None, str | None]:
    """The index (among the GPUs it sees) of the GPU this rank should use, or why it cannot have one.

    node_gpus[r]: what local rank r sees (`visible_gpus`). Each rank takes the first GPU it sees
    that no rank before it took, the ranks that see fewer GPUs choosing first: every rank seeing
    every GPU gives local rank r GPU r; SLURM's --gpus-per-task=1 (each rank sees only its own
    GPU) gives each GPU 0. NCCL needs a physical GPU of its own per rank on a node, so when none
    is left NCCL is refused; gloo then shares, GPU local_rank mod (GPUs seen).
    """
    mine = node_gpus[local_rank]
    if not mine:
        return None, f"rank {rank} sees no GPU: check CUDA_VISIBLE_DEVICES on this node"
    taken: set[str] = set()
    for r in sorted(range(len(node_gpus)), key=lambda r: (len(node_gpus[r]), r)):
        free = [g for g in node_gpus[r] if g not in taken]
        if r == local_rank:
            if free:
                return mine.index(free[0]), None
            break
        taken.update(free[:1])
    if backend == "nccl":
        n = len(set().union(*map(set, node_gpus)))
        return None, (
            f"rank {rank} is local rank {local_rank} of {len(node_gpus)} on its node, which share "
            f"{n} GPU(s) among them: NCCL needs a GPU of its own per rank, so start fewer engines "
            "per node or use gloo"
        )
    return local_rank % len(mine), None


def backend_environment(backend: str) -> dict[str, str]:
    """Variables the backend reads when its process group is made.

    NCCL: its watchdog ends every hang. ProcessGroupNCCL's constructor starts no watchdog when
    TORCH_NCCL_BLOCKING_WAIT is set (it logs "TORCH_NCCL_BLOCKING_WAIT is enabled, NO watchdog
    thread is created"; torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, pytorch/pytorch): then
    only a Python `wait()` times out, never a collective whose end a stream waits for (DDP's
    comm-hook `fut.then`, FSDP2's streams), so BLOCKING_WAIT is set to 0 whatever the shell says.
    The watchdog times out each collective after the process group's timeout (torch 2.13,
    distributed_c10d.py:1728, init_process_group: "the duration after which collectives will be
    aborted asynchronously and the process will crash") and, with TORCH_NCCL_ASYNC_ERROR_HANDLING=3
    (SkipCleanUp, the constructor's default: `getCvarInt(TORCH_NCCL_ASYNC_ERROR_HANDLING, 3)`, set
    here so a shell's 0 cannot turn it off), ends the process (SIGABRT), which the watch reports
    as a RankDiedError. The price: a rank stuck in NCCL waits in `.item()` or a synchronize, not
    in the collective, until that timeout.
    Gloo: its collectives block and time out by themselves; an error reaches a future's waiter.
    """
    if backend != "nccl":
        return {}
    return {"TORCH_NCCL_BLOCKING_WAIT": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}


def setup(settings: Settings, stacks: str | None = None) -> RankInfo:
    """Join every MPI rank in one torch process group, as `settings` say.

    Used from it: backend and device, port (None: rank 0's OS picks a free one), threads
    (None: this node's cores shared among its ranks), timeout (None: TIMEOUT_S), debug (a
    TORCH_DISTRIBUTED_DEBUG level), iface (the interface the nodes share, used only when the
    ranks span several nodes; on one node the rendezvous store, Gloo and NCCL listen on
    loopback only). stacks: a folder where this rank
    writes its Python stacks on SIGUSR1 and as it dies (see `dump_stacks_on_signal` and
    `dump_stacks_on_death`). flight_recorder (entries, or None): record this rank's collectives
    in torch's Flight Recorder, and dump them into `stacks` when the watch asks (`record_flights`).
    """
    from datetime import timedelta

    from mpi4py import MPI
    import torch
    import torch.distributed as dist

    from ..compat import fill_in

    fill_in(dist)  # torch 2.8-2.12: the collectives' current names, which the labs use
    s = settings
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if stacks is not None:
        dump_stacks_on_signal(stack_file(stacks, rank))
        dump_stacks_on_death(last_stacks_file(stacks, rank))
    if s.flight_recorder:
        record_flights(s.flight_recorder, stacks, rank)
    if s.debug is not None:  # torch reads it when it is imported: set it, then tell torch
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = s.debug
        dist.set_debug_level_from_env()
    # What GPUs each rank of this node sees: ranks that see the same one cannot each own it.
    local_rank, local_size, node_gpus = _on_node(comm, visible_gpus() if s.device == "cuda" else [])
    # Ranks on one node share its cores: give each its share instead of all of them.
    torch.set_num_threads(s.threads or threads_per_rank(local_size))
    gpu, problem = gpu_for(rank, local_rank, s.backend, node_gpus) if s.device == "cuda" else (None, None)
    host = socket.gethostname()
    ifname, addr, net_problem = _listen_interface(comm.allgather(host), s.iface)
    # Decide together: if one rank cannot start, none waits in a rendezvous that never completes.
    problems = [p for p in comm.allgather(problem or net_problem) if p]
    if problems:
        raise RuntimeError("; ".join(problems))
    dev = torch.device("cpu") if gpu is None else torch.device("cuda", gpu)
    if gpu is not None:
        torch.cuda.set_device(gpu)
    if dist.is_initialized():
        dist.destroy_process_group()

    # Gloo's and NCCL's own sockets listen on this interface only (the default is the address the
    # host name resolves to, reachable from the network).
    os.environ.update(GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
    timeout = timedelta(seconds=TIMEOUT_S)  # for the rendezvous
    store, port = None, s.port
    if rank == 0:  # port 0: the OS picks a port nobody holds, so concurrent clusters never collide
        # TCPStore binds every interface when it opens its own socket; handed one bound to `addr`, it
        # listens there only. The store owns the descriptor from here on, and closes it when destroyed.
        listener = listen_socket(addr, port or 0)
        port = listener.getsockname()[1]
        fd = listener.detach()
        try:
            store = dist.TCPStore(addr, port, size, is_master=True, timeout=timeout, wait_for_workers=False,
                                  master_listen_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
    addr, port = comm.bcast((addr, port), root=0)
    if rank != 0:
        store = dist.TCPStore(addr, port, size, is_master=False, timeout=timeout)
    os.environ.update(
        MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local_rank)
    )
    os.environ.update(backend_environment(s.backend))  # read when the process group is made
    kwargs = {"device_id": dev} if s.backend == "nccl" else {}
    # On NCCL the timeout arms the watchdog, which ends a rank whose collective never completes.
    collective_timeout = timedelta(seconds=s.timeout or TIMEOUT_S)
    dist.init_process_group(s.backend, store=store, rank=rank, world_size=size, timeout=collective_timeout, **kwargs)
    return RankInfo(rank, size, local_rank, dev, port, host, os.getpid())


def record_flights(entries: int, stacks: str | None, rank: int) -> None:
    """Keep this rank's last `entries` collectives in torch's Flight Recorder, and dump them into
    `stacks` when the watch asks (dplab.cluster.flight: a daemon thread, nothing that outlives us).

    torch reads TORCH_FR_BUFFER_SIZE once per process, when the recorder is first used: set it
    before the process group is made.
    """
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(entries)
    if stacks is not None:
        flight.answer_requests(stacks, rank)


def finalize() -> None:
    """Leave the torch process group if this rank is in one."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def stack_file(folder: str, rank: int) -> str:
    """Where rank `rank` writes its stacks."""
    return os.path.join(folder, f"rank{rank}.stacks")


_stack_log = None  # kept open for faulthandler, which writes to its file descriptor


def dump_stacks_on_signal(path: str) -> None:
    """On SIGUSR1, append the Python stack of the thread that runs the cells to `path`, even
    while it is blocked in C code.

    faulthandler writes from the signal handler itself, so this works while the rank waits
    inside MPI or a collective, where no Python code (and no KeyboardInterrupt) can run. It
    dumps only the thread the signal lands on: Linux hands a signal sent to the process to its
    main thread, which runs the cells, unless that thread already has one pending. Dumping
    every thread walks the others' frames while they run and killed engines with SIGSEGV
    (tests/test_failures.py: a few hundred dumps while cells run).
    """
    import faulthandler
    import signal

    global _stack_log
    _stack_log = open(path, "a")  # append: the client reads what each dump adds
    faulthandler.register(signal.SIGUSR1, file=_stack_log, all_threads=False, chain=False)


def last_stacks_file(folder: str, rank: int) -> str:
    """Where rank `rank` writes its stacks as it dies."""
    return os.path.join(folder, f"rank{rank}.last")


_last_log = None  # kept open, as _stack_log is
#: Signals that end a process that sends them to itself, and that faulthandler does not watch.
_ENDS_BY_DEFAULT = ("SIGKILL", "SIGHUP", "SIGQUIT")


def dump_stacks_on_death(path: str) -> None:
    """Write every thread's Python stack to `path` as this process dies, so the client can say
    which line of the cell a rank that died was running.

    From faulthandler's signal handlers (they run even inside C code): on a fatal signal
    (SIGSEGV; SIGABRT, which NCCL's watchdog raises; SIGFPE, SIGBUS, SIGILL) and on SIGTERM
    (a batch system's cancel). From Python, just before the call: os._exit(), and os.kill() of
    this process with a signal that ends it (seen by an audit hook). Nothing can see a SIGKILL
    from another process: the out-of-memory killer's, or MPICH's mpiexec's, which kills every
    other rank when one dies; the client then says so.
    """
    import faulthandler
    import signal
    import sys

    global _last_log
    if _last_log is not None:  # hooks are for life: set up once per process
        return
    _last_log = open(path, "w")
    faulthandler.enable(file=_last_log, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=_last_log, all_threads=True, chain=True)
    me = os.getpid()
    ends = {getattr(signal, name) for name in _ENDS_BY_DEFAULT}

    def dump(cause: str) -> None:
        if os.getpid() == me:  # not in a forked child (a DataLoader worker, say)
            _last_log.write(f"dplab: {cause}\n")
            _last_log.flush()
            faulthandler.dump_traceback(file=_last_log, all_threads=True)

    def on_audit(event: str, args: tuple) -> None:
        if event == "os.kill" and args[0] in (me, 0) and args[1] in ends:
            dump(f"os.kill({signal.Signals(args[1]).name})")

    real_exit = os._exit

    def exit_and_say_where(code):
        dump(f"os._exit({code})")
        real_exit(code)

    sys.addaudithook(on_audit)
    os._exit = exit_and_say_where
