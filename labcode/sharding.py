"""Generated from labs/07_sharding.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.nn.utils import vector_to_parameters


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
LOW_BYTES = 2                        # a bf16 or fp16 parameter or gradient


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
ADAM_K = 12                          # fp32 master weights, momentum and variance: 4 + 4 + 4 bytes


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
STAGES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
def model_state_bytes(psi, p=1, stage=0, k=ADAM_K, low=LOW_BYTES):
    # Bytes of parameters, gradients and optimizer state per rank; stage s shards the first s of
    # (optimizer state, gradients, parameters) over p ranks.
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {sorted(STAGES)}, got {stage!r}")
    params = low * psi / (p if stage >= 3 else 1)
    grads = low * psi / (p if stage >= 2 else 1)
    return params + grads + k * psi / (p if stage >= 1 else 1)


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
class ZeRO1Adam:
    # Adam whose state each rank keeps for one 1/p slice of the flat parameters (ZeRO stage 1).
    def __init__(self, params, group=None, **adam):
        self.params = list(params)
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.numel = sum(q.numel() for q in self.params)              # Ψ
        self.shard_numel = -(-self.numel // self.ranks)                # ⌈Ψ/p⌉
        r, n = dist.get_rank(group), self.shard_numel
        flat = self.flat([q.detach() for q in self.params])
        self.shard = flat[r * n:(r + 1) * n].clone().requires_grad_()  # my slice, a leaf tensor
        self.opt = torch.optim.Adam([self.shard], **adam)

    def flat(self, tensors):
        # One vector of p·⌈Ψ/p⌉ values: the tensors one after the other, then zeros.
        v = torch.cat([t.reshape(-1) for t in tensors])
        return F.pad(v, (0, self.ranks * self.shard_numel - self.numel))

    @torch.no_grad()
    def step(self):
        grads = self.flat([q.grad for q in self.params])
        self.shard.grad = torch.empty_like(self.shard)
        dist.reduce_scatter_single(self.shard.grad, grads, group=self.group)  # my slice of the sum
        self.shard.grad.div_(self.ranks)                                      # the mean, as DDP's
        self.opt.step()                                                       # Adam on my slice
        full = torch.empty_like(grads)
        dist.all_gather_single(full, self.shard, group=self.group)            # every updated slice
        vector_to_parameters(full[:self.numel], self.params)

    def zero_grad(self):
        for q in self.params:
            q.grad = None

    def state_bytes(self):
        # Bytes of Adam's per-value state (momentum and variance) this rank holds.
        return sum(t.numel() * t.element_size() for t in self.opt.state[self.shard].values() if t.dim() > 0)


# From labs/07_sharding.ipynb, section "3. ZeRO-1 and FSDP train what DDP trains".
def shard_units(model, mesh, reshard_after_forward=True):
    # FSDP2: each Linear is one unit (its parameters are gathered together), then the root.
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
