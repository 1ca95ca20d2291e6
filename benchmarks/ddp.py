"""Step time of data-parallel training with and without overlap of all-reduce and backward.

Times one training step (forward, backward, gradient averaging, SGD update) of a
41 MB-gradient MLP (`labcode.overlap.WIDE_MLP`, from Lab 4) on every rank, for:

  compute only   no communication at all (the floor; the ranks' models drift apart)
  no overlap     one flat all-reduce after backward (Lab 2's method)
  hook overlap   one async all-reduce per bucket, launched from gradient hooks
  DDP            torch DistributedDataParallel, for several bucket_cap_mb values

and prints the medians and the ratios DDP / no-overlap and hook / no-overlap, measured
in the same run with the configurations interleaved step by step. DDP / no-overlap compares
two implementations; hook / no-overlap and DDP(25 MiB) / DDP(50 MiB, one bucket) change
only whether communication overlaps backward.

Settings that make overlap visible on a CPU box: one core per rank (p = 2 on 2 cores),
several buckets (caps of 1 to 25 MiB; at 50 MiB the 39 MiB of gradients form one bucket,
which cannot overlap), and a per-rank batch large enough that backward takes about as long
as the all-reduce (B = 64 here). Oversubscribed cores (p > cores) hide nothing.

The training step is Lab 4's `make_step` and the timing loop is `dplab.timing.interleaved`,
the one the lab uses. Launch recipes (from the repository root, with the venv's bin/ on PATH):

    python benchmarks/ddp.py                        # starts `mpiexec -n 2` itself
    python benchmarks/ddp.py --ranks 4 --batch 128  # other p or per-rank batch B
    mpiexec -n 2 python benchmarks/ddp.py           # launch the ranks yourself (MPI)

Backend and device: the kit's one policy (`dplab.cluster.settings.choose_backend`,
through `Settings.for_job`); the lines above the table say which ran.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's own option: the per-rank batch."""
    ap.add_argument("--batch", type=int, default=64, help="per-rank batch B (default 64)")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    return "--batch must be at least 1" if args.batch < 1 else None


def run(args: argparse.Namespace, job) -> None:
    """On every rank of the job: time every configuration; rank 0 prints the table."""
    import torch
    import torch.distributed as dist

    from dplab.timing import machine, ranks_interleaved
    from dplab.models import gradient_bytes, mlp
    from labcode.overlap import CAPS, WIDE_MLP, make_step  # Lab 4's own code

    rank, world_size, device = job.rank, job.world_size, job.device
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(args.batch, 784, generator=gen).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)

    kinds = {"compute only": ("none", None), "no overlap": ("after", None)}
    kinds.update({f"hook overlap {c} MiB": ("hook", c) for c in CAPS})
    kinds.update({f"DDP bucket_cap_mb={c}": ("ddp", c) for c in CAPS})
    configs = {name: make_step(kind, x, y, device, cap)[1] for name, (kind, cap) in kinds.items()}
    # A step is as slow as its slowest rank: the max over ranks, then the median over repeats.
    med = ranks_interleaved(configs, args.repeats, args.warmup, device)
    if rank == 0:
        base = med["no overlap"]
        mb = gradient_bytes(mlp(sizes=WIDE_MLP)) / 2**20
        # short lines, so that the listing fits the book's output box (tests/test_output_width.py)
        print(f"# DDP overlap benchmark: p={world_size}, B={args.batch}, {mb:.1f} MiB of fp32 "
              f"gradients, {args.repeats} repeats (median)")
        print(f"# backend={dist.get_backend()}, device={device.type}, "
              f"torch threads per rank: {torch.get_num_threads()}")
        print(f"# machine: {machine()}")
        print(f"{'configuration':28s} {'step ms':>9s} {'/ no overlap':>13s}")
        for name, t in med.items():
            print(f"{name:28s} {1e3 * t:9.1f} {t / base:13.3f}")
        ddp_best = min((t, n) for n, t in med.items() if n.startswith("DDP"))
        hook_best = min((t, n) for n, t in med.items() if n.startswith("hook"))
        print(f"ratio DDP bucket_cap_mb=25 / no overlap: {med['DDP bucket_cap_mb=25'] / base:.3f}")
        print(f"ratio best DDP ({ddp_best[1]}) / no overlap: {ddp_best[0] / base:.3f}")
        print("same code, only the overlap differs:")
        print(f"  ratio best hook ({hook_best[1]}) / no overlap: {hook_best[0] / base:.3f}")
        print(f"  ratio DDP bucket_cap_mb=25 / DDP bucket_cap_mb=50 (one bucket): "
              f"{med['DDP bucket_cap_mb=25'] / med['DDP bucket_cap_mb=50']:.3f}")
        comm = base - med["compute only"]
        print(f"communication exposed without overlap: {1e3 * comm:.1f} ms per step")


def main(argv=None) -> int:
    """Start the ranks, or be one of them (dplab.cluster.jobs.main)."""
    from dplab.cluster import jobs

    return jobs.main(__file__, run, ranks=2, add_arguments=add_arguments, check=check, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
