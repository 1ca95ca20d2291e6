"""Run under `mpiexec -n 2`: Lab 4's bucket ratios on DDP and on two broken DDPs, and the check
that catches a DDP that never all-reduces.

Rank 0 prints one JSON line: the noise reference, the tolerance, whether communication has a
resource of its own, and for DDP with 5 MiB buckets (as it is, with every bucket all-reduced
twice, and with no all-reduce at all) the measured ratio to one bucket, which the lab prints
as a measurement and no longer checks (issue 61); and, for DDP as it is and with no
all-reduce, whether the ranks' weights agree after the steps.
"""
import functools
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from labcode.overlap import BW, CAPS, ddp_bucket_bytes, make_step
from labcode.overlap_timing import (REPEATS, overlapped_ratio, paired_ratio, ratio_tolerance,
                                    slowest_rank_times)

info = engine.setup(Settings.for_job(device="cpu", threads=1))  # one core per rank, as in the lab
device = info.device
gen = torch.Generator().manual_seed(info.rank)
x, y = torch.randn(BW, 784, generator=gen), torch.randint(0, 10, (BW,), generator=gen)
CAP = CAPS[1]


def twice(group, bucket):
    """Broken: every bucket is all-reduced twice (the first result is thrown away)."""
    dist.all_reduce(bucket.buffer().clone(), group=group)
    return allreduce_hook(group, bucket)


def never(group, bucket):
    """Broken: no all-reduce at all."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


steps = {"compute only": make_step("none", x, y, device),
         "one": make_step("ddp", x, y, device, CAPS[-1]),
         "one again": make_step("ddp", x, y, device, CAPS[-1]),  # the noise reference
         "ddp": make_step("ddp", x, y, device, CAP),
         "twice": make_step("ddp", x, y, device, CAP),
         "never": make_step("ddp", x, y, device, CAP)}
steps["twice"][0].register_comm_hook(None, twice)
steps["never"][0].register_comm_hook(None, never)
for model, step in steps.values():
    for _ in range(3):  # warm-up; DDP rebuilds its buckets in here
        step()
fns = {name: step for name, (model, step) in steps.items()}
fns["forward only"] = functools.partial(steps["compute only"][0], x)
per_step = slowest_rank_times(fns, REPEATS, device)


def ranks_agree(model) -> bool:
    """Whether every rank holds the same weights, bit for bit."""
    flat = torch.cat([w.detach().reshape(-1) for w in model.parameters()])
    low, high = flat.clone(), flat.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


agree = {name: ranks_agree(steps[name][0]) for name in ("ddp", "never")}
if info.rank == 0:
    med = {name: sorted(t)[len(t) // 2] for name, t in per_step.items()}
    noise, tol = ratio_tolerance(per_step, "one", ["ddp", "one again"])  # as the lab does
    own_resource = info.world_size < (os.cpu_count() or 1)
    overlapped = {CAP: overlapped_ratio(med["compute only"], med["forward only"], med["one"],
                                        ddp_bucket_bytes(steps["ddp"][0]))}
    out = {"noise": noise, "tol": tol, "own_resource": own_resource, "overlapped": overlapped[CAP],
           "agree": agree}
    for name in ("ddp", "twice", "never"):
        out[name] = paired_ratio(per_step[name], per_step["one"])
    print("RESULT " + json.dumps(out), flush=True)
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
