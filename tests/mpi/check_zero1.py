"""Run under `mpiexec -n p`: Lab 7's ZeRO1 trains what ZeroRedundancyOptimizer (with DDP) and one
process train, with Adam, AdamW and SGD with momentum, from ranks seeded differently, with a frozen
layer and a parameter that never gets a gradient; a scheduler drives it through its param groups;
a checkpoint of its state resumes at the same p as if never stopped; a parameter with a gradient on
some ranks only needs find_unused=True; the optimizers it cannot shard are refused."""
import io
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from labcode.sharding import ZeRO1

info = engine.setup(Settings.for_job(device="cpu"))
rank, p = info.rank, info.world_size
D, B, STEPS = 9, 4, 4
OPTIMIZERS = {
    "adam": (torch.optim.Adam, {"lr": 1e-2}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    "sgd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
}


class Net(nn.Module):
    """A frozen first layer, two trained ones, a parameter forward never uses, and one
    (`gate.weight`) that rank 0 alone uses when `extra_on_rank0` is set."""

    def __init__(self, extra_on_rank0=False):
        super().__init__()
        self.frozen = nn.Linear(D, D).requires_grad_(False)
        self.hidden, self.out = nn.Linear(D, D), nn.Linear(D, 2)
        self.spare = nn.Parameter(torch.ones(3))  # never used: no gradient, no step
        self.alt = nn.Parameter(torch.full((2,), 0.1))  # a gradient every other step
        self.step_number = 0
        self.gate = nn.Linear(1, 2, bias=False)  # registered last: in the last rank's slice
        nn.init.constant_(self.gate.weight, 0.5)
        self.extra_on_rank0 = extra_on_rank0

    def forward(self, x, r):
        y = self.out(torch.tanh(self.hidden(torch.tanh(self.frozen(x)))))
        if self.step_number % 2 == 0:
            y = y + self.alt
        return y * self.gate.weight[:, 0] if self.extra_on_rank0 and r == 0 else y


def batch(step, r):
    g = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(B, D, generator=g, dtype=torch.float64), torch.randint(0, 2, (B,), generator=g)


def build(seed, extra=False):
    torch.manual_seed(seed)
    return Net(extra).double()


def vector(model):
    return torch.cat([q.detach().reshape(-1) for q in getattr(model, "module", model).parameters()])


def train(model, opt, steps, sched=None, one_process=False, first=0):
    for step in range(first, steps):
        getattr(model, "module", model).step_number = step
        opt.zero_grad()
        if one_process:  # every rank's loss, averaged: the global batch
            batches = [batch(step, r) for r in range(p)]
            sum(F.cross_entropy(model(x, r), y) for r, (x, y) in enumerate(batches)).div(p).backward()
        else:
            x, y = batch(step, rank)
            F.cross_entropy(model(x, rank), y).backward()
        opt.step()
        if sched:
            sched.step()
    return vector(model)


def groups(model):  # two param groups: the output layer at a tenth of the learning rate
    return [{"params": [model.frozen.weight, model.frozen.bias, model.hidden.weight, model.hidden.bias,
                        model.spare, model.alt, model.gate.weight]},
            {"params": model.out.parameters(), "lr": 1e-3}]


checks = {}
for name, (cls, kw) in OPTIMIZERS.items():
    ref = build(0)
    w_ref = train(ref, cls(ref.parameters(), **kw), STEPS, one_process=True)
    zero = build(rank)
    opt = ZeRO1(zero.parameters(), cls, **kw)
    w_zero = train(zero, opt, STEPS)
    ddp = DDP(build(rank), find_unused_parameters=True)
    w_zro = train(ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, **kw), STEPS)
    d_ref, d_zro = (w_zero - w_ref).abs().max().item(), (w_zero - w_zro).abs().max().item()
    checks[name] = d_ref <= 1e-12 and d_zro <= 1e-12
    # no state for `spare` and `gate` (never a gradient here), as torch.optim keeps none; state
    # for the rest
    never = [i for i, q in enumerate(opt.trained) if q is zero.spare or q is zero.gate.weight]
    checks[f"{name}_skips"] = all((piece in opt.optim.state) == (i not in never)
                                  for i, a, b, piece in opt.pieces)
    if not checks[name]:
        print(f"rank {rank}: {name}: vs one process {d_ref:.1e}, vs ZeroRedundancyOptimizer {d_zro:.1e}",
              file=sys.stderr)


def scheduled(model, opt_class):
    opt = opt_class(groups(model), torch.optim.AdamW, lr=1e-2, weight_decay=0.1) if opt_class is ZeRO1 else \
        torch.optim.AdamW(groups(model), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 ** k)
    return opt, sched


# A scheduler halves the learning rate every step, through param_groups.
ref = build(0)
opt, sched = scheduled(ref, torch.optim.AdamW)
w_ref = train(ref, opt, STEPS, sched, one_process=True)
zero = build(rank)
opt, sched = scheduled(zero, ZeRO1)
w_sched = train(zero, opt, STEPS, sched)
lrs = [g["lr"] for g in opt.param_groups]
checks["scheduler"] = (w_sched - w_ref).abs().max().item() <= 1e-12 and lrs == [1e-2 * 0.5 ** STEPS,
                                                                                1e-3 * 0.5 ** STEPS]

# A checkpoint after 2 steps, through bytes as torch.save writes them, resumed into a new model and
# optimizer of another seed: the same weights as the 4 steps without a stop.
first = build(rank)
opt, sched = scheduled(first, ZeRO1)
train(first, opt, 2, sched)
saved = io.BytesIO()
torch.save({"model": first.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, saved)
saved.seek(0)
state = torch.load(saved)
second = build(rank + 7)
opt2, sched2 = scheduled(second, ZeRO1)
second.load_state_dict(state["model"])
opt2.load_state_dict(state["opt"])
sched2.load_state_dict(state["sched"])
# the remaining steps, on the same batches as the run without a stop
d_resume = (train(second, opt2, STEPS, sched2, first=2) - w_sched).abs().max().item()
checks["resume"] = d_resume == 0
if d_resume:
    print(f"rank {rank}: resumed vs uninterrupted: {d_resume:.1e}", file=sys.stderr)
# Another rank's state, or another p's, is refused with a clear error.
wrong = dict(state["opt"], where=dict(state["opt"]["where"], rank=rank + 1))
try:
    opt2.load_state_dict(wrong)
    checks["wrong_rank"] = False
except ValueError as e:
    checks["wrong_rank"] = "each rank loads the state it saved" in str(e)

# `gate.weight` gets a gradient on rank 0 only. With find_unused=True the ranks count it, and the
# step is one process's; without, the last rank, which holds it, sees no gradient of its own and
# skips it (only when p > 1: with one rank, rank 0 holds it).
ref = build(0, extra=True)
w_ref = train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), 1, one_process=True)
found, unfound = build(rank, extra=True), build(rank, extra=True)
w_found = train(found, ZeRO1(found.parameters(), torch.optim.SGD, find_unused=True, lr=0.1), 1)
w_unfound = train(unfound, ZeRO1(unfound.parameters(), torch.optim.SGD, lr=0.1), 1)
checks["find_unused"] = (w_found - w_ref).abs().max().item() <= 1e-12
d_unfound = (w_unfound - w_ref).abs().max().item()
checks["default_skips"] = (d_unfound > 1e-6) == (p > 1)

# A slice of nothing: Ψ = 2 values at p = 3 leave the last rank without a piece.
torch.manual_seed(0)
ref = nn.Linear(1, 1).double()
tiny = nn.Linear(1, 1).double()
tiny.load_state_dict(ref.state_dict())
x1 = torch.arange(1.0, p + 1, dtype=torch.float64).reshape(p, 1)
o_ref, o_tiny = torch.optim.SGD(ref.parameters(), lr=0.1), ZeRO1(tiny.parameters(), torch.optim.SGD, lr=0.1)
for _ in range(2):
    o_ref.zero_grad()
    ref(x1).square().mean().backward()
    o_ref.step()
    o_tiny.zero_grad()
    (tiny(x1[rank:rank + 1]).square().sum()).backward()
    o_tiny.step()
checks["tiny"] = all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(tiny.parameters(), ref.parameters()))


def refused(make, error, said):
    try:
        make()
    except error as e:
        return said in str(e)
    return False


checks["refuses_lbfgs"] = refused(lambda: ZeRO1(build(rank).parameters(), torch.optim.LBFGS), ValueError,
                                  "LBFGS does not update each value")
mixed = build(rank)
mixed.out.float()
checks["refuses_mixed"] = refused(lambda: ZeRO1(mixed.parameters()), ValueError, "of one dtype on one device")
net = build(rank)
opt = ZeRO1(net.parameters(), lr=0.1)
net.frozen.requires_grad_(True)
checks["refuses_unfrozen"] = refused(opt.step, ValueError, "frozen or unfrozen after ZeRO1 was built")
checks["refuses_new_group"] = refused(lambda: opt.add_param_group({"params": [nn.Parameter(torch.ones(1))]}),
                                      NotImplementedError, "give every param group to its constructor")
sys.stdout.write(f"rank {rank}: " + " ".join(f"{k} {v}" for k, v in checks.items()) + "\n")
sys.stdout.flush()
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
