"""Update intervals (p50, p99) and gradients per second under an injected straggler, for
Lab 8's synchronous all-reduce, synchronous parameter server with and without a backup
worker, local SGD (H = 4) and asynchronous parameter server, side by side in one run.

Every rank, in every step (or every gradient it computes), sleeps STRAGGLER_D seconds with
probability STRAGGLER_Q (`labcode.stragglers.straggler_delay`, seeded, so every scheme sees
the same kind of straggler). The MNIST MLP, B = 32 rows per gradient. The schemes:

  sync all-reduce         all p ranks, `sync_sgd_step`: one all-reduce per step
  sync PS                 rank 0 serves, p - 1 workers; each update waits for all of them
  sync PS, k = 1 backup   the same, each update uses the first p - 2 gradients
  local SGD, H = 4        all p ranks, `local_sgd_step`: an average every 4 steps
  async PS                rank 0 applies each gradient as it arrives

Each scheme runs blocks of UPDATES updates (the async server: UPDATES·(p - 1) updates, the
same number of gradients as the synchronous server), and the blocks run in turn, repeat by
repeat (`dplab.timing.interleaved`), so all schemes see the same load; a block costs what its
slowest rank took. The training code is Lab 8's own (`labcode.stragglers`). It prints, per
scheme, the gradients in one update, the interval between updates (p50, p99 over all
repeats) and gradients per second (the median block). On the 2-core box that tests the book,
4 ranks oversubscribe the cores. Launch recipes (from the repository root, venv bin/ on PATH):

    python benchmarks/stragglers.py                  # starts `mpiexec -n 4` itself
    python benchmarks/stragglers.py --ranks 3
    mpiexec -n 4 python benchmarks/stragglers.py     # launch the ranks yourself (MPI)

Backend and device: the kit's one policy (`dplab.cluster.settings.choose_backend`,
through `Settings.for_job`); the table's first line says which ran. The parameter-server schemes
send parameters and gradients over MPI, from host memory, whatever the device.
"""
from __future__ import annotations

import argparse
import os
import sys


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's own option: the updates in one block."""
    ap.add_argument("--updates", type=int, default=20, help="synchronous updates per block (default 20, a multiple of 4)")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    return "--updates must be a positive multiple of 4" if args.updates < 4 or args.updates % 4 else None


def run(args: argparse.Namespace, job) -> None:
    """On every rank of the job: run every scheme's blocks in turn; rank 0 prints the table."""
    import time

    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.nn.utils import parameters_to_vector

    from dplab.data import load_mnist
    from dplab.models import mlp
    from dplab.timing import interleaved, machine
    from labcode import stragglers as lab  # Lab 8's own code

    rank, p, device = job.rank, job.world_size, job.device
    cuda = device.type == "cuda"
    comm = MPI.COMM_WORLD
    data = load_mnist(job.settings.mnist)
    n_train = len(data.y_train)
    B, U, W, LR, H = 32, args.updates, p - 1, 0.1, 4
    xs = data.x_train.to(device)
    ys = data.y_train.to(device)

    def rows(i, share, of):
        # The i-th batch of share `share` of `of`: B rows, wrapping around the training set.
        part = torch.tensor_split(torch.arange(n_train, device=device), of)[share]
        idx = part[(i * B + torch.arange(B, device=device)) % len(part)]
        return xs[idx], ys[idx]

    blocks = {}                                       # name -> blocks started so far
    stamps = {}                                       # name -> [update times of each block]

    def all_ranks(name, step_fn):
        # U synchronous steps of all p ranks; step_fn(model, x, y, global step, delay).
        model = mlp(seed=0).to(device)

        def block():
            b = blocks[name] = blocks.get(name, -1) + 1
            t0, ts = time.perf_counter(), []
            for i in range(U):
                s = b * U + i
                x, y = rows(s, rank, p)
                step_fn(model, x, y, s, lab.straggler_delay(rank, s, seed=1))
                ts.append(time.perf_counter() - t0)
            stamps.setdefault(name, []).append(ts)
        return block

    def server(name, updates, wait_for):
        # Rank 0 serves, ranks 1..p-1 work, for `updates` updates of the shared parameters.
        w = parameters_to_vector(mlp(seed=0).parameters()).detach().double().numpy()
        model = mlp(seed=0).to(device)

        def block():
            b = blocks[name] = blocks.get(name, -1) + 1
            if rank == 0:
                out = lab.ps_server(comm, w, LR, updates, wait_for, every=updates)
                done = {}
                for t, _, _, used, now, ok in out["log"]:
                    if ok:
                        done[now] = t                 # the last gradient used completes a version
                stamps.setdefault(name, []).append([done[v] for v in sorted(done)])
            else:
                lab.ps_worker(comm, model, lambda i: rows(b * 100 * updates + i, rank - 1, W),
                              lambda i: lab.straggler_delay(rank, b * 100 * updates + i, seed=1))
        return block

    weight = len(torch.tensor_split(torch.arange(p * B), p)[rank]) / (p * B)
    schemes = {"sync all-reduce": (all_ranks("sync all-reduce", lambda m, x, y, s, dl: lab.sync_sgd_step(
        m, x, y, LR, weight, dl)), p)}
    if W >= 1:
        schemes["sync PS"] = (server("sync PS", U, W), W)
    if W >= 2:
        schemes["sync PS, k = 1 backup"] = (server("sync PS, k = 1 backup", U, W - 1), W - 1)
    schemes["local SGD, H = 4"] = (all_ranks("local SGD, H = 4", lambda m, x, y, s, dl: lab.local_sgd_step(
        m, x, y, LR, s, H, weight, dl)), p)
    if W >= 1:
        schemes["async PS"] = (server("async PS", U * W, None), 1)

    def start(name):                                  # untimed: every rank starts together
        comm.Barrier()
        if cuda:
            torch.cuda.synchronize()

    times = interleaved({n: fn for n, (fn, _) in schemes.items()}, args.repeats, args.warmup, before=start)
    table = torch.tensor(np.stack([times[n] for n in schemes]), dtype=torch.float64, device=device)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)      # a block costs what its slowest rank took
    block_s = dict(zip(schemes, table.cpu().numpy()))
    if rank == 0:
        q, d = lab.STRAGGLER_Q, lab.STRAGGLER_D
        print(f"# Straggler benchmark: Lab 8's schemes on the MNIST MLP, B = {B} rows per gradient, "
              f"straggler q = {q}, d = {1e3 * d:.0f} ms on every rank; {p} ranks ({W} PS workers + 1 server), "
              f"backend={dist.get_backend()}, device={device.type}; {args.repeats} interleaved blocks of "
              f"{U} synchronous updates ({U * W} async) per scheme")
        print(f"# machine: {machine()}; {p} ranks; torch threads per rank: {torch.get_num_threads()}"
              + ("; more ranks than cores: oversubscribed" if p > (os.cpu_count() or 1) else ""))
        print(f"{'scheme':24s} {'grads/update':>12s} {'p50 ms':>8s} {'p99 ms':>8s} {'grads/s':>9s}")
        for name, (_, per_update) in schemes.items():
            kept = stamps[name][args.warmup:]          # the timed blocks only
            gaps = np.concatenate([np.diff([0.0, *ts]) for ts in kept])
            updates = len(kept[0])
            rate = per_update * updates / np.median(block_s[name])
            print(f"{name:24s} {per_update:12d} {1e3 * np.median(gaps):8.1f} "
                  f"{1e3 * np.quantile(gaps, 0.99):8.1f} {rate:9.1f}")
        print(f"model, extra mean wait per synchronous step: all-reduce {1e3 * d * lab.p_step_delayed(p, q):.1f} ms"
              + (f", sync PS {1e3 * d * lab.p_step_delayed(W, q):.1f} ms" if W >= 1 else "")
              + (f", k = 1 backup {1e3 * d * lab.p_step_delayed(W, q, 1):.1f} ms" if W >= 2 else ""))


def main(argv=None) -> int:
    """Start the ranks, or be one of them (dplab.cluster.jobs.main)."""
    from dplab.cluster import jobs

    # Here a repeat is a block of --updates updates, not one step.
    return jobs.main(__file__, run, ranks=4, add_arguments=add_arguments, check=check,
                     repeats=5, warmup=1, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
