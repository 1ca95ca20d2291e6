"""Timing helpers: every figure the book quotes is a median of repeats."""
from __future__ import annotations

import platform
import time
from typing import Callable

import numpy as np


def time_repeats(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> np.ndarray:
    """Call fn warmup + repeats times and return the repeats' wall times in seconds."""
    for _ in range(warmup):
        fn()
    out = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


def median(samples) -> float:
    """Median of timing samples, the statistic the book reports."""
    return float(np.median(np.asarray(samples)))


def machine() -> str:
    """A one-line description of the machine the numbers came from."""
    import os

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {cpu}, {platform.system()}"
