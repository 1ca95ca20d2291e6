"""Draw img/bench_big/{scaling,overlap,nodes}.svg: what `make bench-big` measured on the 2-core
machine (left) and on the largest machine that has run it (right), side by side.

Read from benchmarks/results/big_*.json (benchmarks/big/big_results.py picks the two and
draws them); make bench-big redraws these after each run. A panel with no result says so.

  scaling.svg  speed-up over p = 1 at a fixed global batch (chapters/data_parallelism.md)
  overlap.svg  step time with and without overlap of all-reduce and backward (ddp_inside.md)
  nodes.svg    flat ring vs hierarchical all-reduce on two nodes (allreduce_algorithms.md)

Run from the repository root: .venv/bin/python img/bench_big/make_figures.py
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent

from benchmarks.big import big_results as br  # noqa: E402  (installed with the kit)
from dplab.plots import svg_bytes, write_figures  # noqa: E402


def figures() -> dict[str, bytes]:
    """Each part's side-by-side figure, as SVG bytes."""
    small, large = br.pick_pair(br.load_all())
    return {f"{part}.svg": svg_bytes(br.draw(small, large, part)) for part in br.PARTS}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
