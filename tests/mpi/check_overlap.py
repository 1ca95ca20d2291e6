"""Run under `mpiexec -n 2`: hook-overlap and flat all-reduce give DDP's gradients and buckets."""
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from dplab.models import mlp
from labcode.overlap import OverlapAllReduce, allreduce_gradients, ddp_bucket_bytes, reverse_buckets

info = engine.setup(Settings.for_job(device="cpu"))
sizes = (784, 256, 256, 256, 10)
gen = torch.Generator().manual_seed(info.rank)
x, y = torch.randn(16, 784, generator=gen), torch.randint(0, 10, (16,), generator=gen)


def grads(kind, cap_mb=1):
    model = mlp(sizes=sizes)
    if kind == "ddp":
        model = DDP(model, bucket_cap_mb=cap_mb)
    hooks = OverlapAllReduce(model.parameters(), cap_mb) if kind == "hook" else None
    for _ in range(3):  # DDP rebuilds its buckets after the first steps; the hooks must reset
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        if kind == "after":
            allreduce_gradients(model)
        elif kind == "hook":
            hooks.wait()
    out = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return out, model


g_after, _ = grads("after")
g_hook, hook_model = grads("hook", 0.5)
g_ddp, ddp = grads("ddp", 0.5)
ddp_sizes = ddp_bucket_bytes(ddp)
hand_sizes = [sum(p.numel() * 4 for p in b) for b in reverse_buckets(list(ddp.module.parameters()), int(0.5 * 2**20))]
d_hook = (g_hook - g_after).abs().max().item()
d_ddp = (g_ddp - g_after).abs().max().item()
print(f"rank {info.rank}: hook {d_hook <= 1e-6} ddp {d_ddp <= 1e-6} buckets {ddp_sizes == hand_sizes} n={len(hand_sizes)}")
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
