"""Generated from labs/07_sharding.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import labcode.costmodel as cm
import math
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import vector_to_parameters


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
LOW_BYTES = 2                        # a bf16 or fp16 parameter or gradient


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
ADAM_K = 12  # fp32 master weights, momentum and variance: 4 + 4 + 4 bytes


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
STAGES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
GPU_BYTES = 80e9            # an 80 GB H100 (NVIDIA H100 datasheet), decimal bytes


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
def model_state_bytes(psi, p=1, stage=0, k=ADAM_K, low=LOW_BYTES):
    # Bytes of parameters, gradients and optimizer state per rank; stage s shards the
    # first s of (optimizer state, gradients, parameters) over p ranks.
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {sorted(STAGES)}, got {stage!r}")
    params = low * psi / (p if stage >= 3 else 1)
    grads = low * psi / (p if stage >= 2 else 1)
    return params + grads + k * psi / (p if stage >= 1 else 1)


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
class ZeRO1Adam:
    # Adam whose state each rank keeps for one 1/p slice of the flat parameters
    # (ZeRO stage 1).
    def __init__(self, params, group=None, **adam):
        self.params = list(params)
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.numel = sum(q.numel() for q in self.params)              # Ψ
        self.shard_numel = -(-self.numel // self.ranks)                # ⌈Ψ/p⌉
        r, n = dist.get_rank(group), self.shard_numel
        flat = self.flat([q.detach() for q in self.params])
        # my slice, a leaf tensor
        self.shard = flat[r * n:(r + 1) * n].clone().requires_grad_()
        self.opt = torch.optim.Adam([self.shard], **adam)

    def flat(self, tensors):
        # One vector of p·⌈Ψ/p⌉ values: the tensors one after the other, then zeros.
        v = torch.cat([t.reshape(-1) for t in tensors])
        return F.pad(v, (0, self.ranks * self.shard_numel - self.numel))

    @torch.no_grad()
    def step(self):
        grads = self.flat([q.grad for q in self.params])
        self.shard.grad = torch.empty_like(self.shard)
        # my slice of the sum
        dist.reduce_scatter_single(self.shard.grad, grads, group=self.group)
        self.shard.grad.div_(self.ranks)  # the mean, as DDP's
        self.opt.step()  # Adam on my slice
        full = torch.empty_like(grads)
        # every updated slice
        dist.all_gather_single(full, self.shard, group=self.group)
        vector_to_parameters(full[:self.numel], self.params)

    def zero_grad(self):
        for q in self.params:
            q.grad = None


# From labs/07_sharding.ipynb, section "3. ZeRO-1 and FSDP train what DDP trains".
METHODS = ("DDP", "ZeRO-1", "FSDP")


# From labs/07_sharding.ipynb, section "3. ZeRO-1 and FSDP train what DDP trains".
def shard_units(model, mesh, reshard_after_forward=True):
    # FSDP2: each Linear is one unit (its parameters are gathered together), then
    # the root. True is passed explicitly: fully_shard's default, None, is True for
    # every unit but the root, False for the root (torch/distributed/fsdp/
    # _fully_shard/_fully_shard.py); this MLP's root holds no parameter of its own.
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


# From labs/07_sharding.ipynb, section "3. ZeRO-1 and FSDP train what DDP trains".
def prepare(method, model, lr, group=None):
    # The model and Adam optimizer `method` trains with on a process group
    # (None: every rank).
    device = next(model.parameters()).device
    if method == "DDP":
        ids = [device.index] if device.type == "cuda" else None
        model = DDP(model, device_ids=ids, process_group=group)
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    if method == "ZeRO-1":
        return model, ZeRO1Adam(model.parameters(), group=group, lr=lr)
    if method == "FSDP":
        model = shard_units(
            model, DeviceMesh.from_group(group or dist.group.WORLD, device.type)
        )
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


# From labs/07_sharding.ipynb, section "4. Optimizer state: 1/p of it per rank".
def local(t):
    # This rank's shard of a DTensor (FSDP2's parameters), or the tensor itself.
    return t.to_local() if hasattr(t, "to_local") else t


# From labs/07_sharding.ipynb, section "4. Optimizer state: 1/p of it per rank".
def optimizer_state_bytes(opt):
    # Bytes of the optimizer's per-value state (Adam's momentum and variance) on
    # this rank.
    opt = getattr(opt, "opt", opt)  # ZeRO1Adam keeps its Adam in .opt
    return sum(local(t).numel() * local(t).element_size()
               for state in opt.state.values() for t in state.values() if t.dim() > 0)


# From labs/07_sharding.ipynb, section "4. Optimizer state: 1/p of it per rank".
def fsdp_shard_numel(shapes, ranks, rank=None):
    # Values FSDP2 keeps on `rank` of parameters of these shapes: ⌈rows/p⌉ rows of
    # each, as torch.chunk splits them, the last ranks fewer; rank=None gives the
    # padded ⌈rows/p⌉ shard.
    total = 0
    for s in shapes:
        chunk = -(-s[0] // ranks)
        rows_here = chunk if rank is None else max(0, min(chunk, s[0] - rank * chunk))
        total += rows_here * math.prod(s[1:])
    return total


# From labs/07_sharding.ipynb, section "5. Bytes on the wire".
def sent_bytes(calls):
    # What a rank sends under the ring for these collectives: half an all-reduce for
    # a reduce-scatter or an all-gather.
    half = {"all_reduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5}
    return sum(
        cm.cost("ring", c.nbytes, c.ranks).wire_bytes * half[c.kind] for c in calls
    )


# From labs/07_sharding.ipynb, section "6. Memory per rank".
def held_bytes(model, opt):
    # Bytes of parameters, gradients and optimizer state this rank holds
    # (FSDP's: its shards).
    ps = list(model.parameters())
    return {"params": sum(local(q).numel() * local(q).element_size() for q in ps),
            "grads": sum(local(q.grad).numel() * local(q.grad).element_size()
                         for q in ps if q.grad is not None),
            "optimizer": optimizer_state_bytes(opt)}


# From labs/07_sharding.ipynb, section "6. Memory per rank".
def peak_bytes(model, opt, step):
    # The most bytes of tensors alive at once during step(), from PyTorch's
    # memory trackers.
    inner = getattr(opt, "opt", opt)  # ZeRO1Adam keeps its Adam in .opt
    if isinstance(model, FSDPModule):
        tracker = FSDPMemTracker(model, inner)
    else:
        tracker = MemTracker()
        tracker.track_external(model, inner)
    with tracker:
        step()
    return next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]


# From labs/07_sharding.ipynb, section "Measure".
def replay(calls, group, device):
    # A function that issues the collectives `calls` lists (kind and full-buffer
    # bytes, as collectives_of records them) again on `group`, with float32 buffers of
    # the same sizes: a step's communication alone.
    ops = []
    for c in calls:
        full = torch.zeros(c.nbytes // 4, device=device)
        part = torch.zeros(c.nbytes // 4 // c.ranks, device=device)
        if c.kind == "all_reduce":
            ops.append(lambda full=full: dist.all_reduce(full, group=group))
        elif c.kind == "reduce_scatter":
            ops.append(lambda full=full, part=part:
                       dist.reduce_scatter_single(part, full, group=group))
        elif c.kind == "all_gather":
            ops.append(lambda full=full, part=part:
                       dist.all_gather_single(full, part, group=group))
        else:
            raise ValueError(f"cannot replay a {c.kind!r}")

    def run():
        for op in ops:
            op()
    return run
