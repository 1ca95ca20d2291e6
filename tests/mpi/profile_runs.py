"""Run under `mpiexec -n 2` with an output folder: the traces that tests/test_profiles.py checks.

- Lab 4: DDP at caps 5 MiB and one bucket, traced with the lab's timeline and profiled with its
  `profile_steps` (labcode.profiling); each rank saves its timeline events as JSON.
- Lab 8: synchronous steps in which rank 0 sleeps STRAGGLER_D, profiled as the lab does.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from dplab.cluster import engine
from dplab.cluster.settings import Settings
from dplab.models import mlp
from dplab.profiles import RUN_KEY, kineto_quiet
from labcode.overlap import BW
from labcode.overlap_timing import traced_step
from labcode.profiling import profile_steps
from labcode.stragglers import STRAGGLER_D, sync_sgd_step

out, run = sys.argv[1], sys.argv[2]
info = engine.setup(Settings.for_job(device="cpu", threads=1))
rank, device = info.rank, info.device
gen = torch.Generator().manual_seed(rank)
x, y = torch.randn(BW, 784, generator=gen), torch.randint(0, 10, (BW,), generator=gen)
events = {}
for cap in (5, 50):
    _, step, timeline = traced_step(x, y, device, cap)
    for _ in range(3):
        step()
    events[cap] = profile_steps(step, timeline, os.path.join(out, f"cap{cap}"), 6, run)
with open(os.path.join(out, f"events{rank}.json"), "w") as f:
    json.dump({str(c): e for c, e in events.items()}, f)

model = mlp(seed=0)
xs, ys = x[:32], y[:32]
with kineto_quiet(), profile(activities=[ProfilerActivity.CPU]) as prof:
    for s in range(8):
        dist.barrier()
        with record_function(f"ProfilerStep#{s}"):
            sync_sgd_step(model, xs, ys, 0.1, 0.5, STRAGGLER_D if rank == 0 else 0.0)
    prof.add_metadata(RUN_KEY, run)
os.makedirs(os.path.join(out, "straggler"), exist_ok=True)
prof.export_chrome_trace(os.path.join(out, "straggler", f"rank{rank}.json"))
engine.finalize()
