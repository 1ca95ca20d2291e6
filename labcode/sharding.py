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


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
LOW_BYTES = 2                        # a bf16 or fp16 parameter or gradient


# From labs/07_sharding.ipynb, section "1. What every rank holds under DDP".
ADAM_K = 12  # fp32 master weights, momentum and variance: 32 bits each


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
NOT_ELEMENTWISE = tuple(
    getattr(torch.optim, name)
    for name in ("LBFGS", "Adafactor", "Muon", "SparseAdam")
    if hasattr(torch.optim, name)
)


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
def slice_pieces(params, ranks, rank):
    # Where slice `rank` of `ranks` equal slices of ⌈Ψ/p⌉ values falls in `params`,
    # flattened one after the other: (index, first, last + 1) in each parameter.
    n, start, pieces = -(-sum(q.numel() for q in params) // ranks), 0, []
    for i, q in enumerate(params):
        a, b = max(rank * n - start, 0), min((rank + 1) * n - start, q.numel())
        if a < b:
            pieces.append((i, a, b))
        start += q.numel()
    return pieces


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
def copy_hyperparameters(source, target):
    # Every setting of each param group (lr, betas, ...), but not its parameters.
    for s, t in zip(source, target):
        t.update({k: v for k, v in s.items() if k != "params"})


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
class SlicedState:
    # state_dict and load_state_dict for an optimizer that keeps this rank's slice of
    # the state in self.optim: each rank saves its own and loads it back at the same p.
    def where(self):
        return {"ranks": self.ranks, "rank": dist.get_rank(self.group), "Ψ": self.numel}

    def state_dict(self):
        copy_hyperparameters(self.param_groups, self.optim.param_groups)
        return {"where": self.where(), "slice": self.optim.state_dict()}

    def load_state_dict(self, state_dict):
        if state_dict["where"] != self.where():
            raise ValueError(
                f"this state was saved by {state_dict['where']}, not by "
                f"{self.where()}: each rank loads the state it saved, at the same p, "
                "for the same parameters"
            )
        self.optim.load_state_dict(state_dict["slice"])
        copy_hyperparameters(self.optim.param_groups, self.param_groups)


# From labs/07_sharding.ipynb, section "2. ZeRO-1 by hand".
class ZeRO1(SlicedState, torch.optim.Optimizer):
    # ZeRO stage 1 around an optimizer that updates each value from its own gradient
    # and state (SGD, Adam, AdamW, ...): its slice is cut at parameter boundaries into
    # pieces, so the inner optimizer sees param groups, skips a parameter without a
    # gradient and counts each parameter's steps as it would for the whole parameter.
    def __init__(self, params, optimizer_class=torch.optim.Adam, group=None,
                 find_unused=False, **defaults):
        if isinstance(optimizer_class, type) and issubclass(optimizer_class,
                                                            NOT_ELEMENTWISE):
            raise ValueError(f"{optimizer_class.__name__} does not update each value "
                             "from its own gradient and state: a slice cannot serve it")
        super().__init__(params, defaults)  # param_groups: the whole parameters
        self.group, self.find_unused = group, find_unused
        self.ranks, r = dist.get_world_size(group), dist.get_rank(group)
        # frozen parameters are left out: they get no gradient, so no state
        self.every = [q for g in self.param_groups for q in g["params"]]
        self.trained = [q for q in self.every if q.requires_grad]
        self.frozen = [not q.requires_grad for q in self.every]
        kinds = {(q.dtype, q.device) for q in self.trained}
        if len(kinds) != 1:
            raise ValueError("ZeRO1 needs trained parameters, of one dtype on one "
                             f"device; these are {sorted(map(str, kinds))}")
        with torch.no_grad():  # every rank starts from group rank 0's values, as in DDP
            for q in self.every:
                dist.broadcast(q, group=group, group_src=0)
        self.numel = sum(q.numel() for q in self.trained)               # Ψ
        self.shard_numel = -(-self.numel // self.ranks)                 # ⌈Ψ/p⌉
        group_of = {id(q): k for k, g in enumerate(self.param_groups)
                    for q in g["params"]}
        groups = [{**g, "params": []} for g in self.param_groups]
        self.pieces = []  # (index in trained, a, b, values a to b - 1 as a tensor)
        for i, a, b in slice_pieces(self.trained, self.ranks, r):
            piece = self.trained[i].detach().reshape(-1)[a:b].clone().requires_grad_()
            self.pieces.append((i, a, b, piece))
            groups[group_of[id(self.trained[i])]]["params"].append(piece)
        self.optim = optimizer_class(groups, **defaults)
        # the inner optimizer's defaults (betas, eps, ...) into param_groups
        copy_hyperparameters(self.optim.param_groups, self.param_groups)

    @torch.no_grad()
    def step(self, closure=None):
        if [not q.requires_grad for q in self.every] != self.frozen:
            raise ValueError("a parameter was frozen or unfrozen after ZeRO1 was "
                             "built, which cut its slices then: build a new ZeRO1")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        copy_hyperparameters(self.param_groups, self.optim.param_groups)  # a new lr
        has = [q.grad is not None for q in self.trained]
        grads = torch.cat([(q.grad if h else torch.zeros_like(q)).reshape(-1)
                           for q, h in zip(self.trained, has)])
        grads = F.pad(grads, (0, self.ranks * self.shard_numel - self.numel))
        used = has
        if self.find_unused:  # a gradient on any rank counts; the others add zeros
            used = torch.tensor(has, dtype=torch.int32, device=grads.device)
            dist.all_reduce(used, group=self.group)
            used = used.tolist()
        mine = torch.empty(self.shard_numel, dtype=grads.dtype, device=grads.device)
        dist.reduce_scatter_single(mine, grads, group=self.group)  # my slice of the sum
        mine /= self.ranks                                         # the mean, as DDP's
        at = 0
        for i, a, b, piece in self.pieces:
            piece.copy_(self.trained[i].reshape(-1)[a:b])  # as they are now (a load)
            piece.grad = mine[at:at + b - a] if used[i] else None  # None: no step
            at += b - a
        self.optim.step()
        at = 0
        for *_, piece in self.pieces:  # my updated values, in place of the gradients
            piece.grad = None
            mine[at:at + piece.numel()] = piece
            at += piece.numel()
        full = torch.empty_like(grads)
        dist.all_gather_single(full, mine, group=self.group)       # every updated slice
        sizes = [q.numel() for q in self.trained]
        for q, values in zip(self.trained, full[:self.numel].split(sizes)):
            q.copy_(values.view_as(q))  # in place: the parameters keep their storage
        return loss

    def add_param_group(self, param_group):
        if hasattr(self, "optim"):  # after __init__: the slices are already cut
            raise NotImplementedError("ZeRO1 cuts its slices once: give every param "
                                      "group to its constructor")
        super().add_param_group(param_group)


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
        return model, ZeRO1(model.parameters(), torch.optim.Adam, group, lr=lr)
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
    opt = getattr(opt, "optim", opt)  # ZeRO1 keeps its slice's optimizer in .optim
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
def peak_bytes(model, opt, step, device):
    # The most bytes of tensors alive at once on `device` during step(), from
    # PyTorch's memory trackers.
    inner = getattr(opt, "optim", opt)  # ZeRO1 keeps its slice's optimizer in .optim
    if isinstance(model, FSDPModule):
        tracker = FSDPMemTracker(model, inner)
    else:
        tracker = MemTracker()
        tracker.track_external(model, inner)
    with tracker:
        step()
    # One entry per device: a GPU rank's snapshot holds "cpu" too.
    return tracker.get_tracker_snapshot("peak")[device]["Total"]


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
