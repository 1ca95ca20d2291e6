"""How long `dplab.start_cluster` takes (engines ready, process group joined), how long a
one-rank error takes to come back while the other ranks wait in MPI, and how long `stop()`
takes, with the engines healthy and with them stuck in a collective.

Targets, medians of repeats on a 2-core box: 4 engines ready in <= 4 s; the error in <= 10 s;
stop in <= 2 s healthy and <= 10 s stuck.

    python benchmarks/cluster_start.py            # 4 engines, 5 repeats
    python benchmarks/cluster_start.py --p 2 --repeats 3

It is the one benchmark that does not use `dplab.cluster.jobs.main`: it is no MPI job, it
times the starting of one.
"""
import argparse
import time

import numpy as np

import dplab
from dplab.timing import machine


ONE_RANK_FAILS = """\
from mpi4py import MPI
if rank == 1:
    raise ValueError("one rank fails")
MPI.COMM_WORLD.barrier()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=4, help="engines (ranks) to start")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    engines, joined, stops, errors, stuck_stops = [], [], [], [], []
    for _ in range(args.repeats):
        c = dplab.start_cluster(args.p)
        engines.append(c.engines_seconds)
        joined.append(c.start_seconds)
        t0 = time.perf_counter()
        c.stop()
        stops.append(time.perf_counter() - t0)
    for _ in range(args.repeats):
        c = dplab.start_cluster(args.p)
        t0 = time.perf_counter()
        try:
            c.view.execute(ONE_RANK_FAILS)
        except dplab.StuckRanksError:
            errors.append(time.perf_counter() - t0)
        c.restart()
        c.view.execute(ONE_RANK_FAILS, block=False)  # the others stay stuck
        time.sleep(0.5)
        t0 = time.perf_counter()
        c.stop()
        stuck_stops.append(time.perf_counter() - t0)
    assert len(errors) == args.repeats, "a one-rank failure did not raise StuckRanksError"
    print(f"cluster start-up, {args.p} MPI engines, median of {args.repeats} on {machine()}")
    print(f"  engines ready         {np.median(engines):6.2f} s   (target <= 4 s for 4 engines)")
    print(f"  process group joined  {np.median(joined):6.2f} s   (includes importing torch on every engine)")
    print(f"  stop                  {np.median(stops):6.2f} s   (target <= 2 s)")
    print(f"  one-rank error        {np.median(errors):6.2f} s   (target <= 10 s; the others wait in MPI)")
    print(f"  stop while stuck      {np.median(stuck_stops):6.2f} s   (target <= 10 s)")


if __name__ == "__main__":
    main()
