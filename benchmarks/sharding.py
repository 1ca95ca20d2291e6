"""Memory per rank, bytes sent and step time of DDP, ZeRO-1 and FSDP2, for q = 2 and 4 ranks.

Trains an MLP (fp32, Adam) with Lab 7's own code (`labcode.sharding`): `prepare` builds each
method on the first q ranks of the job, for every q in 2, 4 (those up to the job's size).
For each (q, method) it reports, per rank:

  held     parameters, gradients and Adam's state between steps, counted from the tensors,
           and checked here against the formulas of the sharding chapter: 4Ψ + 4Ψ + 8Ψ for
           DDP, 4Ψ + 4Ψ + 8 × its slice's values for ZeRO-1 (⌈Ψ/q⌉, less the padding on the
           last ranks), and 16 × its ⌈rows/q⌉ rows for FSDP (the
           chapter's 16Ψ/q for FSDP, with ZeRO's mixed-precision K = 12 replaced by fp32's 8)
  peak     the most tensor bytes alive during one step (PyTorch's MemTracker); on a GPU also
           torch.cuda.max_memory_allocated, measured with that method's model alone
  sent     bytes a rank sends per step under the ring, counted from the collectives the step
           calls, and checked against 2(q-1)/q·4Ψ (DDP, ZeRO-1) and 3(q-1)/q·4Ψ (FSDP)
  time     the median step time of the slowest rank, all configurations interleaved step by
           step in one run (`dplab.timing.ranks_interleaved`)

On the 2-core box that tests the book, q = 4 puts two ranks on each core: compare the methods
at the same q, not one q with another. Launch recipes (from the repository root, with the
venv's bin/ on PATH):

    python benchmarks/sharding.py                    # starts `mpiexec -n 4` itself
    python benchmarks/sharding.py --width 4096       # a larger model
    mpiexec -n 4 python benchmarks/sharding.py       # launch the ranks yourself (MPI)

It needs at least 2 ranks: on one there is nothing to shard. Backend and device: the kit's
one policy (`dplab.cluster.settings.choose_backend`, through `Settings.for_job`); the table's
first line says which ran.
"""
from __future__ import annotations

import argparse
import gc
import math
import sys

NEEDS = "benchmarks/sharding.py needs at least 2 ranks: there is nothing to shard on one"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's own options: the model's width and the per-rank batch."""
    ap.add_argument("--width", type=int, default=2048, help="hidden width of the MLP (default 2048)")
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch B (default 32)")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    if args.width < 1 or args.batch < 1:
        return "--width and --batch must be at least 1"
    if args.ranks < 2:
        return f"--ranks {args.ranks}: {NEEDS}"
    return None


def run(args: argparse.Namespace, job) -> None:
    """On every rank of the job: measure every (q, method); rank 0 checks and prints the table."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from dplab.models import mlp
    from dplab.timing import machine, ranks_interleaved
    from dplab.traffic import collectives_of
    from labcode.sharding import (METHODS, fsdp_shard_numel, held_bytes, peak_bytes, prepare,
                                  sent_bytes)  # Lab 7's own code

    rank, world_size, device = job.rank, job.world_size, job.device
    cuda = device.type == "cuda"
    qs = [q for q in (2, 4) if q <= world_size]
    if not qs:  # a job started by hand (mpiexec -n 1), which --ranks does not describe
        raise SystemExit(NEEDS)
    groups = {q: dist.new_group(list(range(q))) for q in qs}
    sizes = (784, args.width, args.width, 10)
    shapes = [q.shape for q in mlp(sizes=sizes).parameters()]
    psi = sum(math.prod(s) for s in shapes)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 784, generator=gen).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)

    def build(q, name):
        model, opt = prepare(name, mlp(seed=0, sizes=sizes).to(device), 1e-3, groups[q])

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return model, opt, step

    # Memory and traffic, one method at a time, so that a GPU's allocator sees it alone.
    measured = {}
    for q in qs:
        for name in METHODS:
            if rank >= q:
                continue
            model, opt, step = build(q, name)
            step()                                          # Adam's state exists after a step
            calls = collectives_of(step, model)
            held = held_bytes(model, opt)
            peak = peak_bytes(model, opt, step)
            cuda_peak = None
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
                step()
                torch.cuda.synchronize()
                cuda_peak = torch.cuda.max_memory_allocated(device) - before + sum(held.values())
            measured[q, name] = {"held": held, "peak": peak, "cuda_peak": cuda_peak,
                                 "sent": sent_bytes(calls)}
            del model, opt, step
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    everyone = [None] * world_size
    dist.all_gather_object(everyone, measured)

    configs = {}
    for q in qs:
        for name in METHODS:
            configs[q, name] = build(q, name)[2] if rank < q else (lambda: None)  # idle outside q
    med = ranks_interleaved(configs, args.repeats, args.warmup, device)

    if rank == 0:
        print(f"# Sharding benchmark: MLP {sizes}, Ψ = {psi:,} parameters, fp32 + Adam, B = {args.batch}, "
              f"backend={dist.get_backend()}, device={device.type}, {args.repeats} repeats (median)")
        print(f"# machine: {machine()}; {world_size} ranks; torch threads per rank: {torch.get_num_threads()}")
        gpu = "  cuda peak MB" if cuda else ""
        print(f"{'q':>2} {'method':>7} {'held MB (max rank)':>19} {'formula MB':>11} {'peak MB':>8}{gpu} "
              f"{'sent MB':>8} {'ms/step':>8} {'/ DDP':>6}")
        for q in qs:
            ring = (q - 1) / q
            shard = -(-psi // q)
            for name in METHODS:
                rows = [everyone[r][q, name] for r in range(q)]
                # Exact counts from the shapes (padding included where a method keeps it): what each rank holds ...
                want = {"DDP": [16 * psi] * q,
                        "ZeRO-1": [8 * psi + 8 * max(0, min(shard, psi - r * shard)) for r in range(q)],
                        "FSDP": [16 * fsdp_shard_numel(shapes, q, r) for r in range(q)]}[name]
                # ... and the chapter's formula, which ignores padding.
                formula = {"DDP": 16 * psi, "ZeRO-1": 8 * psi + 8 * psi / q, "FSDP": 16 * psi / q}[name]
                wire = {"DDP": 2 * ring * 4 * psi, "ZeRO-1": 2 * ring * 4 * q * shard,
                        "FSDP": 3 * ring * 4 * q * fsdp_shard_numel(shapes, q)}[name]
                held = [sum(m["held"].values()) for m in rows]
                assert held == want, f"q={q} {name}: held {held} bytes, expected {want}"
                # Over the q ranks the formula is exact up to ZeRO-1's padding (fewer than q values).
                assert abs(sum(held) - q * formula) < 16 * q, (name, held, formula)
                assert all(math.isclose(m["sent"], wire, rel_tol=1e-12) for m in rows), (name, wire, [m["sent"] for m in rows])
                assert all(m["peak"] >= h for m, h in zip(rows, held))
                peak = max(m["peak"] for m in rows)
                gpu = f" {max(m['cuda_peak'] for m in rows) / 1e6:13.2f}" if cuda else ""
                print(f"{q:>2} {name:>7} {max(held) / 1e6:19.2f} {formula / 1e6:11.2f} {peak / 1e6:8.2f}{gpu} "
                      f"{rows[0]['sent'] / 1e6:8.2f} {1e3 * med[q, name]:8.1f} "
                      f"{med[q, name] / med[q, 'DDP']:6.2f}")
        print("checked: held bytes = the exact padded counts, and q x the formula over the ranks; "
              "sent bytes = 2(q-1)/q·4Ψ (DDP, ZeRO-1) and 3(q-1)/q·4Ψ (FSDP), padded; peak >= held")


def main(argv=None) -> int:
    """Start the ranks, or be one of them (dplab.cluster.jobs.main)."""
    from dplab.cluster import jobs

    return jobs.main(__file__, run, ranks=4, add_arguments=add_arguments, check=check, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
