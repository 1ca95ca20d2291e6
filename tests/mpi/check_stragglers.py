"""Run under `mpiexec -n 3`: Lab 8's parameter server applies every gradient once, its backup
mode uses exactly the first p - 1 - k current gradients, and local SGD at H = 1 is synchronous SGD."""
import sys

import numpy as np
import torch
from mpi4py import MPI
from torch.nn.utils import parameters_to_vector

from dplab.cluster import engine
from dplab.cluster.settings import Settings
from dplab.models import mlp
from dplab.traffic import count_collectives
from labcode.stragglers import local_sgd_step, ps_server, ps_worker, straggler_delay, sync_sgd_step

info = engine.setup(Settings.for_job(device="cpu"))
rank, p = info.rank, info.world_size
comm = MPI.COMM_WORLD
sizes = (20, 7, 2)
W, LR, G = p - 1, 0.1, 25
gen = torch.Generator().manual_seed(rank)
X, Y = torch.randn(64, 20, generator=gen, dtype=torch.float64), torch.randint(0, 2, (64,), generator=gen)
w0 = parameters_to_vector(mlp(sizes=sizes).double().parameters()).detach().numpy()


def batch(i):
    idx = (i * 4 + torch.arange(4)) % 64
    return X[idx], Y[idx]


def delay(i):
    return straggler_delay(rank, i, q=0.3, d=0.005, seed=3)


def serve(updates, wait_for):
    comm.Barrier()
    if rank == 0:
        return ps_server(comm, w0.copy(), LR, updates, wait_for, every=updates), 0, np.zeros_like(w0)
    sent, total = ps_worker(comm, mlp(sizes=sizes).double(), batch, delay)
    return None, sent, total


# Asynchronous: G updates, each pushed gradient applied once, the final parameters equal
# w0 - lr * (sum of what the workers sent), and the staleness adds up to its fixed total.
out, sent, total = serve(G, None)
sums = comm.reduce(total, root=0)
counts = comm.gather(sent, root=0)
# Backup workers: every update the mean of exactly W - 1 gradients computed on its version.
bout, bsent, _ = serve(10, W - 1)
pushed = comm.reduce(bsent, root=0)

# Local SGD at H = 1 against synchronous SGD (float64), and rounds counted at H = 2.
a, b = mlp(sizes=sizes).double(), mlp(sizes=sizes).double()
for s in range(5):
    x, y = batch(s)
    sync_sgd_step(a, x, y, LR, 1 / p)
    local_sgd_step(b, x, y, LR, s, 1, 1 / p)
same = (parameters_to_vector(a.parameters()) - parameters_to_vector(b.parameters())).abs().max().item() <= 1e-12
with count_collectives() as calls:
    for s in range(6):
        local_sgd_step(b, *batch(s), LR, s, 2, 1 / p)
rounds = len(calls) == 3

if rank == 0:
    log = out["log"]
    applied = [(wk, seq) for _, wk, seq, _, _, ok in log if ok]
    once = (len(applied) == len(set(applied)) == G
            and sorted(applied) == sorted((j, i) for j in range(1, p) for i in range(counts[j])))
    exact = float(np.abs((w0 - out["history"][-1][2]) - LR * sums).max()) <= 1e-12
    stale = sum(now - used for _, _, _, used, now, ok in log if ok) == G * (G - 1) // 2 - (G - W) * (G - W + 1) // 2
    blog = bout["log"]
    per = np.bincount([now for _, _, _, used, now, ok in blog if ok], minlength=10).tolist()
    backup = per == [W - 1] * 10 and all(u == n for _, _, _, u, n, ok in blog if ok) and len(blog) == pushed
    flags = [once, exact, stale, backup, same, rounds]
else:
    flags = None
flags = comm.bcast(flags, root=0)
sys.stdout.write("rank {}: once {} exact {} stale {} backup {} h1 {} rounds {}\n".format(rank, *flags))
sys.stdout.flush()
torch.distributed.destroy_process_group()
