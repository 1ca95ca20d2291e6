"""Tokens per second of Lab 6's Transformer under DDP, for q = 1, 2, 4 ranks.

One optimizer step (forward, backward with DDP's all-reduce, clipping, AdamW) of
`labcode.transformer.NumberToWords` on a fixed global batch of GLOBAL_BATCH sequences,
split over the first q ranks, for every q in 1, 2, 4 (those up to the job's size) and for:

  fp32              no autocast
  autocast          bf16 autocast on a CPU, fp16 with GradScaler on a GPU
  autocast + hook   the same, with Lab 6's bf16 compression hook (half the all-reduce bytes)

All configurations are timed in one job, interleaved step by step (`dplab.timing.interleaved`),
and a step costs what its slowest rank takes. The training step, the model and the hook are
Lab 6's own code (`labcode.transformer`). It prints the median step time, tokens per second,
seconds per epoch, and the ratios autocast / fp32 and hook / no hook at each q.

On the 2-core box that tests the book, q = 4 puts two ranks on each core: it cannot be faster
than q = 2. Launch recipes (from the repository root, with the venv's bin/ on PATH):

    python benchmarks/transformer_ddp.py                  # starts `mpiexec -n 4` itself
    python benchmarks/transformer_ddp.py --ranks 2
    mpiexec -n 4 python benchmarks/transformer_ddp.py     # launch the ranks yourself (MPI)

Backend and device: the kit's one policy (`dplab.cluster.settings.choose_backend`,
through `Settings.for_job`); the lines above the table say which ran.
"""
from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace, job) -> None:
    """On every rank of the job: time every configuration; rank 0 prints the table."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.lr_scheduler import LambdaLR

    from dplab.timing import machine, ranks_interleaved
    from labcode import transformer as lab  # Lab 6's own code

    rank, world_size, device = job.rank, job.world_size, job.device
    ids = [device.index] if device.type == "cuda" else None
    qs = [q for q in (1, 2, 4) if q <= world_size]
    groups = {q: dist.new_group(list(range(q))) for q in qs}
    train, _ = lab.number_split(lab.N_TRAIN, lab.N_TEST)
    batch = [lab.encode(s) for s in train[:lab.GLOBAL_BATCH]]
    tokens = sum(len(t) - 1 for _, t in batch)
    amp = lab.amp_dtype_for(device)

    def config(q, amp_dtype, hook=None):
        if rank >= q:
            return lambda: None                      # not in this group: idle
        model = DDP(lab.NumberToWords(seed=0).to(device), device_ids=ids, process_group=groups[q])
        if hook is not None:
            model.register_comm_hook(groups[q], hook)
        opt = lab.make_adamw(model, lr=1e-4)
        sched = LambdaLR(opt, lambda s: 1.0)
        scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
        mine = torch.tensor_split(torch.arange(lab.GLOBAL_BATCH), q)[rank].tolist()
        src, tgt = (t.to(device) for t in lab.pad_collate([batch[i] for i in mine]))
        return lambda: lab.train_step(model, opt, sched, scaler, src, tgt, amp_dtype, 1.0, groups[q])

    configs = {}
    for q in qs:
        configs[f"q={q} fp32"] = config(q, None)
        configs[f"q={q} autocast"] = config(q, amp)
        if q > 1:
            configs[f"q={q} autocast + hook"] = config(q, amp, lab.compress_hook(torch.bfloat16))
    med = ranks_interleaved(configs, args.repeats, args.warmup, device)   # slowest rank, median of repeats
    if rank == 0:
        steps = -(-lab.N_TRAIN // lab.GLOBAL_BATCH)
        # short lines: the book shows this listing in a dropdown (tests/test_output_width.py)
        print(f"# Transformer DDP benchmark: Lab 6's model, {args.repeats} repeats (median)")
        print(f"# global batch {lab.GLOBAL_BATCH} sequences ({tokens} target tokens), "
              f"autocast dtype {str(amp).removeprefix('torch.')}")
        print(f"# backend={dist.get_backend()}, device={device.type}, {world_size} ranks, "
              f"torch threads per rank: {torch.get_num_threads()}")
        print(f"# machine: {machine()}")
        print(f"{'configuration':24s} {'ms/step':>8s} {'tokens/s':>9s} {'s/epoch':>8s}")
        for name, t in med.items():
            print(f"{name:24s} {1e3 * t:8.1f} {tokens / t:9.0f} {steps * t:8.2f}")
        for q in qs:
            line = f"ratio autocast / fp32 at q={q}: {med[f'q={q} autocast'] / med[f'q={q} fp32']:.3f}"
            if q > 1:
                line += f"; hook / no hook: {med[f'q={q} autocast + hook'] / med[f'q={q} autocast']:.3f}"
            print(line)
        print("speed-up over q=1 (fp32): " + ", ".join(
            f"q={q} {med['q=1 fp32'] / med[f'q={q} fp32']:.2f}x" for q in qs))


def main(argv=None) -> int:
    """Start the ranks, or be one of them (dplab.cluster.jobs.main)."""
    from dplab.cluster import jobs

    return jobs.main(__file__, run, ranks=4, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
