"""Run under `mpiexec -n P`: each rank resolves its settings (Settings.for_job), joins via
dplab.cluster.engine.setup, and checks its RankInfo and an all-reduce."""
import dataclasses
import os
import socket
import sys

import torch
import torch.distributed as dist
from mpi4py import MPI

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings

settings = Settings.for_job(device="cpu")
# p from the MPI world, the port from the DPLAB_PORT that run_job set, gloo from the policy
assert (settings.p, settings.backend) == (MPI.COMM_WORLD.Get_size(), "gloo")
port = None if sys.argv[1] == "auto" else settings.port
assert sys.argv[1] == "auto" or port is not None
info = engine.setup(dataclasses.replace(settings, port=port))
assert port is None or info.port == port
assert info.port == int(os.environ["MASTER_PORT"]) == MPI.COMM_WORLD.bcast(info.port)  # rank 0's, on every rank
assert info.host == socket.gethostname() and info.device == torch.device("cpu")
assert info.engine_names() == {"rank": info.rank, "world_size": info.world_size, "local_rank": info.local_rank, "device": info.device}
comm = MPI.COMM_WORLD
assert info.rank == comm.Get_rank() == dist.get_rank() == int(os.environ["RANK"])
assert info.world_size == comm.Get_size() == dist.get_world_size() == int(os.environ["WORLD_SIZE"])
assert info.local_rank == info.rank  # one node
t = torch.arange(2) + 1 + 2 * info.rank
dist.all_reduce(t)
mpi_sum = comm.allreduce((torch.arange(2) + 1 + 2 * info.rank).numpy())
assert t.tolist() == mpi_sum.tolist(), (t, mpi_sum)
print(f"rank {info.rank}/{info.world_size}: {t.tolist()}", flush=True)
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
