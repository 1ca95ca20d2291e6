"""Run under `mpiexec -n p`: Lab 4's HandDDP trains what DDP and one process train, on models
with a frozen layer, tied weights and buffers, from ranks seeded differently, at bucket caps of
0 (one parameter per bucket), 4 KiB and unlimited; gradients arriving in another order on each
rank; a parameter without gradient on any rank is named in an error on every rank; a second
backward pass before wait() is refused."""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from labcode.overlap import HandDDP, OverlapAllReduce

info = engine.setup(Settings.for_job(device="cpu"))
rank, p = info.rank, info.world_size
V, D, B, STEPS, LR = 64, 32, 4, 3, 0.5
CAPS = {"0": 0, "4KiB": 4 / 1024, "unlimited": math.inf}


class TiedLM(nn.Module):
    """Embedding, a frozen layer, a buffer, and an output layer tied to the embedding."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.frozen = nn.Linear(D, D)
        self.frozen.requires_grad_(False)
        self.hidden = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D))
        self.register_buffer("scale", torch.rand(D))  # seeded per rank: only a broadcast agrees
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.embed.weight           # tied

    def forward(self, x):
        h = torch.tanh(self.frozen(self.embed(x))) * self.scale
        return self.head(torch.tanh(self.hidden(h)))


def tokens(step, r):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randint(0, V, (B,), generator=g), torch.randint(0, V, (B,), generator=g)


def build(seed):
    torch.manual_seed(seed)
    return TiedLM().double()


def state_vector(module):
    """Parameters and buffers, one vector."""
    return torch.cat([t.detach().reshape(-1) for t in list(module.parameters()) + list(module.buffers())])


def train(model, after_backward=lambda: None):
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for step in range(STEPS):
        x, y = tokens(step, rank)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        after_backward()
        opt.step()
    return state_vector(getattr(model, "module", model))


# One process on the global batch (every rank's rows), from rank 0's seed: the reference.
ref = build(0)
opt = torch.optim.SGD(ref.parameters(), lr=LR, momentum=0.9)
for step in range(STEPS):
    opt.zero_grad()
    loss = sum(F.cross_entropy(ref(x), y) for x, y in (tokens(step, r) for r in range(p))) / p
    loss.backward()
    opt.step()
w_ref = state_vector(ref)
w_ddp = train(DDP(build(rank)))
frozen_before = build(0).frozen.weight.detach().clone()
checks, buckets = {}, {}
for name, cap in CAPS.items():
    model = build(rank)
    hooks = HandDDP(model, cap)
    w = train(model, hooks.wait)
    d_ref, d_ddp = (w - w_ref).abs().max().item(), (w - w_ddp).abs().max().item()
    checks[f"cap{name}"] = d_ref <= 1e-12 and d_ddp <= 1e-12
    checks[f"frozen{name}"] = model.frozen.weight.grad is None and torch.equal(model.frozen.weight, frozen_before)
    # the tied embed.weight (= head.weight) once, the two hidden layers; not frozen.*
    checks[f"tied{name}"] = sorted(map(hooks.names.get, (q for b in hooks.buckets for q in b))) == [
        "embed.weight", "hidden.0.bias", "hidden.0.weight", "hidden.2.bias", "hidden.2.weight"]
    buckets[name] = len(hooks.buckets)
    if not checks[f"cap{name}"]:
        print(f"rank {rank}: cap {name}: vs one process {d_ref:.1e}, vs DDP {d_ddp:.1e}", file=sys.stderr)

# 64·32 fp64 values (16 KiB) in the embedding, 32·32 (8 KiB) per hidden layer: each cap buckets
# differently.
checks["caps"] = list(buckets.values()) == [5, 3, 1]


class Swapped(nn.Module):
    """Two layers of one shape, in an order that depends on the rank: their gradients arrive in
    another order on each rank."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x, flip):
        first, second = (self.a, self.b) if flip else (self.b, self.a)
        return second(torch.tanh(first(x)))


def swapped_grads(kind):
    torch.manual_seed(0)
    model = Swapped().double()
    x = torch.randn(B, D, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    if kind == "one process":      # every rank's loss, each with its own order, averaged
        sum(model(torch.randn(B, D, generator=torch.Generator().manual_seed(r), dtype=torch.float64),
                  r % 2).square().sum() for r in range(p)).div(p).backward()
    else:
        hooks = HandDDP(model, 0) if kind == "hand" else OverlapAllReduce(model.parameters(), 0)
        model(x, rank % 2).square().sum().backward()
        hooks.wait()
    return torch.cat([q.grad.reshape(-1) for q in model.parameters()])


g_ref = swapped_grads("one process")
checks["order"] = (swapped_grads("hand") - g_ref).abs().max().item() <= 1e-12
# The bare class launches each bucket when it is ready: ranks then pair up different buckets of
# one size, and the sums are wrong (the check above fails on it). One rank has nobody to pair.
checks["bare_order_wrong"] = ((swapped_grads("bare") - g_ref).abs().max().item() > 1e-3) == (p > 1)

# A parameter that gets no gradient, registered first so that its bucket is the last: the
# buckets before it are launched, finished, and the error names it on every rank.
class WithSpare(nn.Module):
    def __init__(self):
        super().__init__()
        self.spare = nn.Linear(2, 2).double()
        self.body = build(rank)

    def forward(self, x):
        return self.body(x)


model = WithSpare()
hooks = HandDDP(model, 0)
x, y = tokens(0, rank)
F.cross_entropy(model(x), y).backward()
try:
    hooks.wait()
    message = ""
except RuntimeError as e:
    message = str(e)
checks["unused"] = all(s in message for s in ("no gradient reached", "spare.weight", "spare.bias",
                                              "find_unused_parameters=True"))
# Two backward passes before wait() would average only the first: refused.
model = build(rank)
hooks = HandDDP(model, 0)
F.cross_entropy(model(x), y).backward()
try:
    F.cross_entropy(model(x), y).backward()
    message = ""
except RuntimeError as e:
    message = str(e)
hooks.wait()  # the first backward's all-reduces, launched on every rank
checks["twice"] = "a second backward pass before wait()" in message
sys.stdout.write(f"rank {rank}: " + " ".join(f"{k} {v}" for k, v in checks.items()) + "\n")
sys.stdout.flush()
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
