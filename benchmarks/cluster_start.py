"""How long `dplab.start_cluster` takes: engines ready, and process group joined.

Target: 4 engines ready in <= 4 s on a 2-core box (median of repeats).

    python benchmarks/cluster_start.py            # 4 engines, 5 repeats
    python benchmarks/cluster_start.py --n 2 --repeats 3
"""
import argparse
import time

import numpy as np

import dplab
from dplab.timing import machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=4, help="engines (ranks) to start")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    engines, joined, stops = [], [], []
    for _ in range(args.repeats):
        c = dplab.start_cluster(args.p)
        engines.append(c.engines_seconds)
        joined.append(c.start_seconds)
        t0 = time.perf_counter()
        c.stop()
        stops.append(time.perf_counter() - t0)
    print(f"cluster start-up, {args.p} MPI engines, median of {args.repeats} on {machine()}")
    print(f"  engines ready         {np.median(engines):6.2f} s   (target <= 4 s for 4 engines)")
    print(f"  process group joined  {np.median(joined):6.2f} s   (includes importing torch on every engine)")
    print(f"  stop                  {np.median(stops):6.2f} s")


if __name__ == "__main__":
    main()
