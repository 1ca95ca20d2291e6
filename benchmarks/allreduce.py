"""Bus bandwidth of hand-written all-reduce (naive, tree, ring) vs MPI.Allreduce and torch gloo.

Every implementation runs side by side in one job, interleaved repeat by repeat, so noise
from other programs hits all of them alike. The table gives busbw = n/t · 2(p-1)/p in GB/s
(median of repeats; t is the slowest rank's time) and the ratio ring / MPI.Allreduce.
Target: the hand-written ring reaches at least 0.8x MPI.Allreduce at 1 MiB and 16 MiB, p = 2.

Launch recipes (from the repository root):

    make bench                                   # every benchmarks/*.py, this one included
    .venv/bin/python benchmarks/allreduce.py     # launches mpiexec -n 2 and -n 4 itself
    .venv/bin/python benchmarks/allreduce.py --ranks 2 --sizes 1048576 --repeats 10

One job by hand (the same code the launcher runs; prints one JSON line from rank 0):

    PATH=$PWD/.venv/bin:$PATH mpiexec -n 2 python benchmarks/allreduce.py

On a SLURM cluster whose MPI srun can start (untested on the 2-core dev box), one rank
per node; the torch rendezvous goes to rank 0's host, on DPLAB_PORT if you set it, else
on a free port that rank 0 picks and tells the others over MPI:

    srun --mpi=pmi2 -N 2 --ntasks-per-node=1 .venv/bin/python benchmarks/allreduce.py

The buffers are in host memory (numpy, MPI), so the torch column runs Gloo on the CPU
(device="cpu", whatever GPUs the machine has).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from labcode.costmodel import busbw  # Lab 3's own code
from labcode.allreduce import allreduce_naive, allreduce_ring, allreduce_tree  # Lab 3's own code

SIZES = (971_048, 1 << 20, 1 << 24)  # the MNIST MLP gradient, 1 MiB, 16 MiB
IMPLS = ("naive", "tree", "ring", "MPI.Allreduce", "torch gloo")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's own option: the message sizes."""
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="message sizes in bytes")


def run(args: argparse.Namespace, job) -> None:
    """On every rank of one job: time every implementation; rank 0 prints one JSON line."""
    from mpi4py import MPI
    import torch
    import torch.distributed as dist

    from dplab.timing import interleaved

    comm = MPI.COMM_WORLD
    p, r = job.world_size, job.rank
    results = {}
    for n in args.sizes:
        count = n // 4
        x = np.full(count, r + 1, dtype=np.float32)
        t = torch.from_numpy(x)
        want = p * (p + 1) / 2
        fns = {
            "naive": lambda: allreduce_naive(comm, x),
            "tree": lambda: allreduce_tree(comm, x),
            "ring": lambda: allreduce_ring(comm, x),
            "MPI.Allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM),
            "torch gloo": lambda: dist.all_reduce(t),
        }

        def reset(name: str) -> None:
            x.fill(r + 1)
            comm.Barrier()

        def check(name: str) -> None:
            assert np.all(x == want), f"{name} gave a wrong sum at n={n}"

        reps = args.repeats if n <= (1 << 22) else max(5, args.repeats // 2)
        times = interleaved(fns, reps, warmup=args.warmup, before=reset, after=check)
        for k in IMPLS:
            slowest = np.empty(reps)
            comm.Allreduce(times[k], slowest, op=MPI.MAX)
            results.setdefault(str(n), {})[k] = float(np.median(slowest))
    if r == 0:
        print(json.dumps({"p": p, "seconds": results}), flush=True)


def sweep(args: argparse.Namespace, start) -> int:
    """Run one job per p in --ranks (start(p)), and print the table from their JSON lines."""
    from dplab.timing import machine

    # two lines, so that the listing fits the book's output box (tests/test_output_width.py)
    print(f"all-reduce busbw, GB/s (median of {args.repeats} repeats; float32; "
          f"p > {os.cpu_count()} oversubscribes the cores)")
    print(f"machine: {machine()}")
    head = f"{'p':>2} {'bytes':>10} " + " ".join(f"{k:>13}" for k in IMPLS) + f" {'ring/MPI':>9}"
    print(head)
    ratios = {}
    for p in args.ranks:
        out: subprocess.CompletedProcess = start(p)
        if out.returncode != 0:
            raise SystemExit(f"mpiexec -n {p} failed ({out.returncode}):\n{out.stderr[-2000:]}")
        res = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
        for n in args.sizes:
            sec = res["seconds"][str(n)]
            bw = {k: busbw(n, sec[k], p) / 1e9 for k in IMPLS}
            ratios[(p, n)] = bw["ring"] / bw["MPI.Allreduce"]
            print(f"{p:>2} {n:>10,} " + " ".join(f"{bw[k]:>13.2f}" for k in IMPLS) + f" {ratios[(p, n)]:>9.2f}")
    target = [(p, n) for (p, n) in ratios if p == 2 and n in (1 << 20, 1 << 24)]
    ok = all(ratios[k] >= 0.8 for k in target)
    print(f"target ring >= 0.8x MPI.Allreduce at 1 MiB and 16 MiB, p=2: {'met' if ok else 'NOT met'}")
    return 0


def main(argv=None) -> int:
    """Start one job per p and print the table, or be one rank of a job."""
    from dplab.cluster import jobs

    return jobs.main(__file__, run, ranks=(2, 4), add_arguments=add_arguments, repeats=20, warmup=1,
                     launch=sweep, settings={"device": "cpu"}, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
