"""Timing helpers: every figure the book quotes is a median of repeats."""
from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np


def interleaved(
    fns: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    before: Callable[[str], object] | None = None,
    after: Callable[[str], object] | None = None,
    sync: Callable[[], object] | None = None,
) -> dict[str, np.ndarray]:
    """Time every fn once per repeat, in turn, so that all of them see the same load on the machine.

    before(name) runs untimed before each call (reset the input, then a barrier so that every
    rank starts together); sync() runs timed after it (torch.cuda.synchronize: a GPU call
    returns before its work is done); after(name) runs untimed (check the result). The first
    `warmup` rounds are not kept. Returns name -> seconds of each repeat on this process; a
    multi-rank caller takes the max over ranks itself (a step is as slow as its slowest rank).
    """
    out = {name: np.empty(repeats) for name in fns}
    for i in range(-warmup, repeats):
        for name, fn in fns.items():
            if before is not None:
                before(name)
            t0 = time.perf_counter()
            fn()
            if sync is not None:
                sync()
            dt = time.perf_counter() - t0
            if after is not None:
                after(name)
            if i >= 0:
                out[name][i] = dt
    return out


def time_repeats(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> np.ndarray:
    """Call fn warmup + repeats times and return the repeats' wall times in seconds."""
    return interleaved({"fn": fn}, repeats, warmup)["fn"]


def median(samples) -> float:
    """Median of timing samples, the statistic the book reports."""
    return float(np.median(np.asarray(samples)))


#: How many standard errors a timing band allows: a normal estimate lands more than 4 from its
#: expectation, either side, once in 16,000 times.
Z = 4


def median_se(samples, relative: bool = False) -> float:
    """The standard error of the median of `samples`: 1.25 σ/√n, with σ estimated robustly as
    1.4826 times the median absolute deviation (a slow outlier moves neither). relative=True
    gives it as a fraction of the median, for ratios of timings."""
    x = np.asarray(samples, dtype=float)
    mid = np.median(x)
    if relative:
        x, mid = x / mid, 1.0
    return float(1.25 * 1.4826 * np.median(np.abs(x - mid)) / np.sqrt(len(x)))


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """A one-line description of the machine the numbers came from."""
    import os

    return f"{os.cpu_count()}-core {cpu_model()}, {platform.system()}"


def ranks_interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int, device,
                      group=None) -> dict[str, float]:
    """`interleaved` on every rank of a process group (default: all), each step started together
    (barrier, then a CUDA sync on a GPU); a step costs what its slowest rank took, and the
    result is the median of those over the repeats."""
    import torch
    import torch.distributed as dist

    sync = torch.cuda.synchronize if device.type == "cuda" else None

    def start(name: str) -> None:  # untimed: every rank starts together, the GPU idle
        dist.barrier(group=group)
        if sync:
            sync()

    times = interleaved(fns, repeats, warmup=warmup, before=start, sync=sync)
    table = torch.tensor([times[name].tolist() for name in fns], dtype=torch.float64, device=device)
    dist.all_reduce(table, op=dist.ReduceOp.MAX, group=group)
    return {name: statistics.median(row) for name, row in zip(fns, table.cpu().tolist())}


def timing_arguments(ap, ranks: int | tuple[int, ...], argv=None, repeats: int = 15, warmup: int = 3):
    """Add a timed MPI benchmark's --ranks/--repeats/--warmup to `ap`, parse argv, check the bounds.

    ranks: the default of --ranks; a tuple makes it take several (a benchmark that runs one job per p).
    """
    several = isinstance(ranks, (tuple, list))
    shown = " ".join(map(str, ranks)) if several else ranks
    ap.add_argument("--ranks", type=int, nargs="+" if several else None, default=list(ranks) if several else ranks,
                    help=f"ranks when the script starts mpiexec itself (default {shown})")
    ap.add_argument("--repeats", type=int, default=repeats,
                    help=f"timed steps per configuration (default {repeats})")
    ap.add_argument("--warmup", type=int, default=warmup,
                    help=f"untimed steps per configuration (default {warmup})")
    args = ap.parse_args(argv)
    if min(args.ranks if several else [args.ranks]) < 1 or args.repeats < 1 or args.warmup < 0:
        ap.error("--ranks and --repeats must be at least 1, --warmup at least 0")
    return args


#: Where `in_band` keeps each timing check's last measured value and band, relative to the
#: lab's folder, when its artifacts/ exists (a lab's, not a test's); the lab runner
#: (booktools.run: make test-labs, make test-load) reads it after each run of a lab.
BANDS_FILE = Path("artifacts") / "timing_bands.json"


def _keep(check: str, record: dict) -> None:
    import json

    if BANDS_FILE.parent.is_dir():
        try:
            kept = json.loads(BANDS_FILE.read_text())
        except (OSError, ValueError):
            kept = {}
        kept[check] = record
        BANDS_FILE.write_text(json.dumps(kept, indent=1) + "\n")


def in_band(check: str, value: float, low: float, high: float) -> bool:
    """Whether a timing check's measured `value` lies in [low, high]; the value and the band are
    kept under `check` in BANDS_FILE, so that the margin of every run can be read back."""
    value, low, high = float(value), float(low), float(high)
    _keep(check, {"value": value, "low": low, "high": high})
    return low <= value <= high


def measured(check: str, value: float) -> float:
    """A timing that a lab prints and does not check: one that a shared machine moves past any
    band that would still tell its mistake from a correct run (the lab checks the mechanism
    instead: counts, bytes, hooks). Kept under `check` in BANDS_FILE as printed only, so that
    make test-load's table shows it beside the checks; returns the value."""
    value = float(value)
    _keep(check, {"value": value, "printed": True})
    return value
