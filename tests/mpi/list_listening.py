"""Run under `mpiexec -n P` (dplab.cluster.jobs.run_job): join via dplab.cluster.engine.setup, run an all-reduce, then
print, as one JSON line per rank, every address this rank listens on and mpiexec's control port."""
import json

import psutil
import torch
import torch.distributed as dist
from mpi4py import MPI

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings

info = engine.setup(Settings.for_job(device="cpu"))
t = torch.ones(1)
dist.all_reduce(t)  # Gloo's pairs are connected now
listening = [[c.laddr.ip, c.laddr.port] for c in psutil.Process().net_connections(kind="inet")
             if c.status == psutil.CONN_LISTEN]
proxy = psutil.Process().parent().cmdline()  # hydra_pmi_proxy --control-port HOST:PORT ...
control_port = int(proxy[proxy.index("--control-port") + 1].rsplit(":", 1)[1])
for rank in range(info.world_size):  # one rank at a time, so lines never interleave
    if rank == info.rank:
        print(json.dumps({"rank": info.rank, "store_port": info.port, "listening": listening,
                          "control_port": control_port}), flush=True)
    MPI.COMM_WORLD.Barrier()
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
