"""Generated from labs/04_ddp.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np
import os
import torch.distributed as dist
from dplab.profiles import RUN_KEY
from dplab.profiles import event_times
from dplab.profiles import kineto_quiet
from dplab.timing import Z
from dplab.timing import in_band
from dplab.timing import measured
from dplab.timing import median_se
from labcode.overlap_timing import slowest_per_step
from torch.profiler import ProfilerActivity
from torch.profiler import profile
from torch.profiler import record_function


# From labs/04_ddp.ipynb, section "The same steps in the PyTorch profiler".
def profile_steps(step, timeline, folder, n, run, group=None):
    # n more steps of a traced run, under the PyTorch profiler: each is named
    # ProfilerStep#i, as HTA expects, and the timeline keeps the same n steps. The
    # trace, tagged with `run`, goes to folder/rank<r>.json. Returns the timeline's
    # events.
    activities = [ProfilerActivity.CPU]
    if timeline.cuda:
        activities.append(ProfilerActivity.CUDA)
    timeline.clear()
    # kineto_quiet: the profiler's C++ side logs its start and stop to stderr
    with kineto_quiet(), profile(activities=activities) as prof:
        for i in range(n):
            dist.barrier(group=group)        # the ranks start each step together
            with record_function(f"ProfilerStep#{i}"):
                step()
        prof.add_metadata(RUN_KEY, run)
    os.makedirs(folder, exist_ok=True)
    prof.export_chrome_trace(os.path.join(folder, f"rank{dist.get_rank()}.json"))
    return timeline.events()


# From labs/04_ddp.ipynb, section "The same steps in the PyTorch profiler".
def profiler_events(analysis, rank):
    # One rank's trace, as HTA parsed it, as timeline events (dplab.trace's form).
    names, start, end = event_times(analysis, rank)
    events = []
    for i in names.index[names.str.startswith("ProfilerStep#")]:
        s = int(names[i].split("#")[1])
        # events begun in the step: Gloo's thread may close an all-reduce's event a
        # moment after the main thread, which the all-reduce released, ends the step
        inside = (start >= start[i]) & (start < end[i])
        fwd = inside & (names == "DistributedDataParallel.forward")
        grads = inside & (names == "torch::autograd::AccumulateGrad")
        comm = inside & names.str.fullmatch(r"(gloo|nccl):all_reduce")
        spans = [("step", "step", start[i], end[i]),
                 ("compute", "forward", start[fwd].min(), end[fwd].max()),
                 ("compute", "backward", end[fwd].max(), end[grads].max())]
        spans += [("all-reduce", f"all-reduce {k}", start[j], end[j])
                  for k, j in enumerate(start[comm].sort_values().index)]
        events += [dict(rank=rank, step=s, lane=lane, name=name, start=float(a),
                        end=float(b)) for lane, name, a, b in spans]
    return events


# From labs/04_ddp.ipynb, section "The same steps in the PyTorch profiler", "The check".
OVERLAP_TOL = 0.10                   # of the all-reduce time


# From labs/04_ddp.ipynb, section "The same steps in the PyTorch profiler", "The check".
STEP_TOL = 0.05                      # of a step


# From labs/04_ddp.ipynb, section "The same steps in the PyTorch profiler", "The check".
def check_profile(timed, profiled, n_buckets):
    # Assert that the profiler's facts agree with the timeline's (timeline_facts of the
    # same steps): n_buckets all-reduces in every step, and the median over the steps
    # of the difference of the slowest rank's overlap within its band. The exposed
    # time and the step length are compared too, and printed: no mistake found moves
    # them and not the overlap or the count. Returns {key: (timeline's median,
    # profiler's median, difference, band)}, the band None where printed only.
    seen = {len(f["launched"]) for f in profiled.values()}
    assert seen == {n_buckets}, \
        f"the profiler saw {seen} all-reduces a step, not {n_buckets}"
    step = float(np.median(slowest_per_step(timed, "length")))
    comm = float(np.median(slowest_per_step(timed, "comm")))
    # an offset of the instants within STEP_TOL of a step is a large share of a short
    # all-reduce (one rank sends nothing): the overlap gets that share as its floor
    overlap_floor = max(OVERLAP_TOL, STEP_TOL * step / comm) if comm else np.inf
    out = {}
    for key in ("overlap", "exposed", "length"):
        a, b = slowest_per_step(timed, key), slowest_per_step(profiled, key)
        diff, band = float(np.median(b - a)), None
        if key == "overlap":
            band = max(overlap_floor, Z * median_se(b - a))
            assert in_band(f"profiler - timeline, {key}", diff, -band, band), \
                f"{key}: the profiler's median is off the timeline's by {diff:.3g}"
        else:
            measured(f"profiler - timeline, {key}", diff)
        out[key] = (float(np.median(a)), float(np.median(b)), diff, band)
    return out
