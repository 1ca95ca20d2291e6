"""Count the collectives a training step issues, and the size of each.

`count_collectives()` wraps torch.distributed's Python collectives for the duration of a `with`
block; FSDP2 and hand-written code call them through the module, so both are seen. DDP's
all-reduce is issued from C++ and bypasses the wrappers: register `counting_allreduce_hook`
as its comm hook instead. Each record says which collective, how many bytes its *full* buffer
holds (the all-reduced tensor, the reduce-scatter input, the all-gather output) and how many
ranks took part. What a rank then sends depends on the algorithm (see labcode.costmodel).
`collectives_of(step, model)` does either, whichever the model needs, for one call of a step.
A collective counts once whatever name it is called by: where one wrapped name reaches another
through torch.distributed (an alias, a shim), only the outermost call counts. (In 2.13 the
deprecated names call distributed_c10d's own functions, which no wrapper replaces.)
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Iterator

# The function, and the positional index or keyword of its full buffer.
_WRAPPED = {
    "all_reduce": (0, "tensor"),
    "reduce_scatter_single": (1, "input"),
    "reduce_scatter_tensor": (1, "input"),
    "all_gather_single": (0, "output_tensor"),
    "all_gather_into_tensor": (0, "output_tensor"),
}
KINDS = {"all_reduce": "all_reduce", "reduce_scatter_single": "reduce_scatter",
         "reduce_scatter_tensor": "reduce_scatter", "all_gather_single": "all_gather",
         "all_gather_into_tensor": "all_gather"}


@dataclass(frozen=True)
class Collective:
    kind: str    # "all_reduce", "reduce_scatter" or "all_gather"
    nbytes: int  # bytes of the full buffer
    ranks: int   # size of the process group


def _group_size(args: tuple, kwargs: dict):
    import torch.distributed as dist

    group = kwargs.get("group")
    if group is None:
        group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    return dist.get_world_size(group)


@contextlib.contextmanager
def count_collectives() -> Iterator[list[Collective]]:
    """Record every collective called through torch.distributed inside the block, in order."""
    import torch.distributed as dist

    calls: list[Collective] = []
    originals = {name: getattr(dist, name) for name in _WRAPPED if hasattr(dist, name)}
    inside = threading.local()  # this block's wrappers on this thread's stack: count the outermost

    def wrap(name, fn):
        index, keyword = _WRAPPED[name]

        def counted(*args, **kwargs):
            depth = getattr(inside, "depth", 0)
            if depth == 0:
                buffer = args[index] if len(args) > index else kwargs[keyword]
                calls.append(Collective(KINDS[name], buffer.numel() * buffer.element_size(),
                                        _group_size(args, kwargs)))
            inside.depth = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                inside.depth = depth

        return counted

    for name, fn in originals.items():
        setattr(dist, name, wrap(name, fn))
    try:
        yield calls
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def counting_allreduce_hook(calls: list[Collective]):
    """A DDP comm hook that records each bucket's all-reduce in `calls`, then does DDP's default."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    import torch.distributed as dist

    def hook(group, bucket):
        buffer = bucket.buffer()
        calls.append(Collective("all_reduce", buffer.numel() * buffer.element_size(),
                                dist.get_world_size(group)))
        return allreduce_hook(group, bucket)

    return hook


def collectives_of(step, model=None) -> list[Collective]:
    """The collectives one call of step() issues. Pass the model when it is a DDP model: its
    all-reduces are then counted by a comm hook, which DDP lets a model register only once."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        calls: list[Collective] = []
        model.register_comm_hook(model.process_group, counting_allreduce_hook(calls))
        step()
        return list(calls)  # the hook stays and goes on recording later steps: not into this list
    with count_collectives() as calls:
        step()
    return calls
