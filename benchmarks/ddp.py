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

Launch recipes (from the repository root, with the venv's bin/ on PATH):

    python benchmarks/ddp.py                        # starts `mpiexec -n 2` itself, gloo on CPU
    python benchmarks/ddp.py --ranks 4 --batch 128  # other p or per-rank batch B
    mpiexec -n 2 python benchmarks/ddp.py           # launch the ranks yourself (MPI)
    torchrun --standalone --nproc-per-node 2 benchmarks/ddp.py   # launch with torchrun
    DPLAB_DEVICE=cuda torchrun --standalone --nproc-per-node 2 benchmarks/ddp.py  # NCCL, one GPU per rank

"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2, help="p when this script starts mpiexec itself (default 2)")
    ap.add_argument("--batch", type=int, default=64, help="per-rank batch B (default 64)")
    ap.add_argument("--repeats", type=int, default=15, help="timed steps per configuration (default 15)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per configuration (default 3)")
    return ap.parse_args(argv)


def launched_by() -> str | None:
    """'torchrun' or 'mpi' when this process is one rank of a job, else None."""
    if "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "MASTER_PORT" in os.environ):
        return "torchrun"
    if any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")):
        return "mpi"
    return None


def launch(args: argparse.Namespace) -> int:
    """Start this script under `mpiexec -n ranks` and return its exit status."""
    from dplab.mpi import run_job

    return run_job(__file__, args.ranks, sys.argv[1:], timeout=1800, capture=False).returncode


def join(how: str):
    """Join the process group; return (rank, world_size, device)."""
    import torch
    import torch.distributed as dist

    want_cuda = os.environ.get("DPLAB_DEVICE", "cpu") == "cuda"
    if how == "mpi":
        from dplab import worker
        from dplab.mpi import job_port

        backend = "nccl" if want_cuda else "gloo"
        info = worker.init(backend, "cuda" if want_cuda else "cpu", job_port())
        return info.rank, info.world_size, torch.device(info.device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if want_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    else:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def run(args: argparse.Namespace, how: str) -> None:
    """Time every configuration on every rank; rank 0 prints the table."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dplab.timing import machine
    from dplab.models import gradient_bytes, mlp
    from labcode.overlap import CAPS, WIDE_MLP, OverlapAllReduce, allreduce_gradients  # Lab 4's own code

    rank, world_size, device = join(how)
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(args.batch, 784, generator=gen).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)
    ids = [device.index] if device.type == "cuda" else None

    def make(kind: str, cap: int | None):
        model = mlp(sizes=WIDE_MLP).to(device)
        if kind == "ddp":
            model = DDP(model, device_ids=ids, bucket_cap_mb=cap)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        hooks = OverlapAllReduce(model, cap) if kind == "hook" else None

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if kind == "after":
                allreduce_gradients(model)
            elif kind == "hook":
                hooks.wait()
            opt.step()

        return step

    configs = {"compute only": make("none", None), "no overlap": make("after", None)}
    configs.update({f"hook overlap {c} MiB": make("hook", c) for c in CAPS})
    configs.update({f"DDP bucket_cap_mb={c}": make("ddp", c) for c in CAPS})
    for step in configs.values():
        for _ in range(args.warmup):
            step()
    times = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, step in configs.items():
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    # A step is as slow as its slowest rank: take the max over ranks, then the median over repeats.
    table = torch.tensor([times[name] for name in configs], dtype=torch.float64)
    if device.type == "cuda":
        table = table.to(device)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)
    med = {name: statistics.median(row) for name, row in zip(configs, table.cpu().tolist())}
    if rank == 0:
        base = med["no overlap"]
        mb = gradient_bytes(mlp(sizes=WIDE_MLP)) / 2**20
        print(f"# DDP overlap benchmark: p={world_size}, B={args.batch}, {mb:.1f} MiB of fp32 gradients, "
              f"backend={dist.get_backend()}, device={device.type}, {args.repeats} repeats (median)")
        print(f"# machine: {machine()}; torch threads per rank: {torch.get_num_threads()}")
        print(f"{'configuration':28s} {'step ms':>9s} {'/ no overlap':>13s}")
        for name, t in med.items():
            print(f"{name:28s} {1e3 * t:9.1f} {t / base:13.3f}")
        ddp_best = min((t, n) for n, t in med.items() if n.startswith("DDP"))
        hook_best = min((t, n) for n, t in med.items() if n.startswith("hook"))
        print(f"ratio DDP bucket_cap_mb=25 / no overlap: {med['DDP bucket_cap_mb=25'] / base:.3f}")
        print(f"ratio best DDP ({ddp_best[1]}) / no overlap: {ddp_best[0] / base:.3f}")
        print(f"ratio best hook ({hook_best[1]}) / no overlap: {hook_best[0] / base:.3f}  (same code, overlap only)")
        print(f"ratio DDP bucket_cap_mb=25 / DDP bucket_cap_mb=50 (one bucket): "
              f"{med['DDP bucket_cap_mb=25'] / med['DDP bucket_cap_mb=50']:.3f}  (same code, overlap only)")
        comm = base - med["compute only"]
        print(f"communication exposed without overlap: {1e3 * comm:.1f} ms per step")
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    """Launch the ranks, or be one of them."""
    args = parse_args(argv)
    how = launched_by()
    if how is None:
        return launch(args)
    run(args, how)
    return 0


if __name__ == "__main__":
    sys.exit(main())
