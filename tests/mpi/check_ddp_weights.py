"""Run under `mpiexec -n 2`: the check that catches a DDP that never all-reduces (Lab 4's bucket
ratios, which timed it too, are a printed measurement since issue 61).

DDP with 5 MiB buckets as it is, and with a comm hook that all-reduces nothing, each take a few
steps on rank-own batches; rank 0 prints one JSON line: whether the ranks' weights agree, bit for
bit, after the steps.
"""
import json

import torch
import torch.distributed as dist

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from labcode.overlap import BW, CAPS, make_step

info = engine.setup(Settings.for_job(device="cpu", threads=1))  # one core per rank, as in the lab
gen = torch.Generator().manual_seed(info.rank)
x, y = torch.randn(BW, 784, generator=gen), torch.randint(0, 10, (BW,), generator=gen)


def never(group, bucket):
    """Broken: no all-reduce at all."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


steps = {name: make_step("ddp", x, y, info.device, CAPS[1]) for name in ("ddp", "never")}
steps["never"][0].register_comm_hook(None, never)
for model, step in steps.values():
    for _ in range(3):  # DDP rebuilds its buckets in here
        step()


def ranks_agree(model) -> bool:
    """Whether every rank holds the same weights, bit for bit."""
    flat = torch.cat([w.detach().reshape(-1) for w in model.parameters()])
    low, high = flat.clone(), flat.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


agree = {name: ranks_agree(model) for name, (model, _) in steps.items()}
if info.rank == 0:
    print("RESULT " + json.dumps({"agree": agree}), flush=True)
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
