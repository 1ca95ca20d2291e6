"""Engine-side set-up: runs inside each MPI rank to join the torch process group."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: str


def _node_rank_and_size(comm) -> tuple[int, int]:
    """Rank among the processes that share this node, and how many they are."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def _master_addr(comm) -> str:
    """Loopback when every rank is on one node, else rank 0's host name."""
    hosts = comm.allgather(socket.gethostname())
    return "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]


def init(backend: str, device: str, port: int, master_addr: str | None = None) -> RankInfo:
    """Set the rendezvous variables from MPI and call init_process_group."""
    from mpi4py import MPI
    import torch
    import torch.distributed as dist

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local_rank, local_size = _node_rank_and_size(comm)
    # Ranks on one node share its cores: give each its share instead of all of them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_size))
    os.environ.update(
        MASTER_ADDR=master_addr or _master_addr(comm),
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local_rank),
    )
    dev = "cpu"
    if device == "cuda":
        n_gpus = torch.cuda.device_count()
        if n_gpus == 0:
            raise RuntimeError(f"rank {rank} sees no GPU: check CUDA_VISIBLE_DEVICES on this node")
        if backend == "nccl" and local_rank >= n_gpus:
            raise RuntimeError(
                f"rank {rank} is local rank {local_rank} but its node has {n_gpus} GPU(s): "
                "NCCL needs one GPU per rank, so start fewer engines per node or use gloo"
            )
        gpu = local_rank % n_gpus
        torch.cuda.set_device(gpu)
        dev = f"cuda:{gpu}"
    if dist.is_initialized():
        dist.destroy_process_group()
    kwargs = {"device_id": torch.device(dev)} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size, **kwargs)
    return RankInfo(rank, size, local_rank, dev)


def finalize() -> None:
    """Leave the torch process group if this rank is in one."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
