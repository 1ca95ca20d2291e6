"""The training run that every recipe in launch/ starts: DDP on a tiny model, float64.

It reads what torch.distributed's default env:// rendezvous reads (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and LOCAL_RANK; each launcher, or its recipe, sets them. Run
without RANK, it is the single-process reference: one process, the whole global batch.
Every rank prints one line: where it runs, and a fingerprint of its final weights.
"""
import hashlib
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, GLOBAL_BATCH = 20, 16  # each global batch of 16 is split among the ranks


def fingerprint(model: torch.nn.Module) -> str:
    """A hash of the weights' bytes (equal replicas), and two sums (for a tolerance)."""
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = hashlib.sha256(w.numpy().tobytes()).hexdigest()[:16]
    ramp = torch.arange(1, len(w) + 1, dtype=w.dtype)
    return f"weights {digest} sums {w.sum().item()!r} {(w * ramp).sum().item()!r}"


def main() -> None:
    torch.set_num_threads(1)  # the same summation order in every process
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")  # env://: reads the four variables
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0))  # not read by torch: for us
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())

    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * GLOBAL_BATCH, 8, dtype=torch.float64, generator=g)
    noise = torch.randn(len(x), dtype=torch.float64, generator=g)
    y = x @ torch.linspace(-1, 1, 8, dtype=torch.float64) + 0.1 * noise
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 1)).double()
    net = DDP(model) if distributed else model
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        lo = step * GLOBAL_BATCH + rank * per_rank  # this rank's share of the batch
        xb, yb = x[lo:lo + per_rank], y[lo:lo + per_rank]
        opt.zero_grad()
        F.mse_loss(net(xb).squeeze(1), yb).backward()  # DDP averages the gradients
        opt.step()
    print(f"rank {rank}/{world_size} local_rank {local_rank} node {node} "
          f"{fingerprint(model)}", flush=True)
    if distributed:
        dist.barrier()  # no rank tears down Gloo pairs that another still uses
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
