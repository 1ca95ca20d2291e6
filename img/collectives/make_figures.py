"""Draw the collectives chapter's figure (img/collectives/collectives.svg) from its own code.

collectives.svg: the seven collectives at P ranks, before and after, as rank x block grids.
What each rank holds afterwards is not drawn from a description: the script calls the
chapter's reference definitions (`labcode.collectives`, exported from chapters/collectives.md)
on blocks that record where they came from, and draws what they return.

Run from the repository root: .venv/bin/python img/collectives/make_figures.py
(tests/test_figures.py fails while a stored figure differs from what this script draws).
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

import labcode.collectives as coll
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style

P = 4     # ranks, and blocks per vector (the chapter reads this line)
FONT = 8  # points: the smallest text the book allows
OPS = ["broadcast", "scatter", "gather", "reduce", "all-gather", "reduce-scatter",
       "all-reduce"]


def block(ranks: list[int], column: int) -> int:
    """A block that holds the sum of the given ranks' block `column`, as one integer.

    Rank r's block c is 2**r + c * 2**P, so a sum of k ranks' block c is the set of those
    ranks in the low P bits plus k * c * 2**P: `origin` reads both back.
    """
    return sum(2**r + column * 2**P for r in ranks)


def origin(value: int) -> tuple[list[int], int]:
    """The ranks whose values a block holds, and which block of the vector it is."""
    ranks = [r for r in range(P) if value >> r & 1]
    return ranks, (value >> P) // len(ranks)


def vector(r: int) -> np.ndarray:
    """Rank r's input: P blocks of one element each."""
    return np.array([block([r], c) for c in range(P)])


def inputs(op: str) -> list:
    """What each rank passes in (None: nothing), as the chapter's definitions take it."""
    if op in ("broadcast", "scatter"):
        return [vector(0)] + [None] * (P - 1)
    if op in ("gather", "all-gather"):
        return [np.array([block([r], r)]) for r in range(P)]  # rank r's block is block r
    return [vector(r) for r in range(P)]


def outputs(op: str) -> list:
    """What the chapter's reference definition returns on each rank."""
    xs = inputs(op)
    out = {"broadcast": lambda: coll.broadcast(xs),
           "scatter": lambda: coll.scatter(xs[0], P),
           "gather": lambda: coll.gather(xs),
           "reduce": lambda: coll.reduce(xs),
           "all-gather": lambda: coll.all_gather(xs),
           "reduce-scatter": lambda: coll.reduce_scatter(xs),
           "all-reduce": lambda: coll.all_reduce(xs)}[op]()
    return [None if o is None else np.ravel(o) for o in out]


def grid(ax, held: list, x0: float) -> None:
    """One rank per row: each block in its column, coloured by the ranks it sums; empty
    outlines where a rank holds nothing."""
    for r, values in enumerate(held):
        y = P - 1 - r
        for c in range(P):
            ax.add_patch(Rectangle((x0 + c, y), 0.9, 0.9, fill=False, ec="0.75", lw=0.6))
        for value in [] if values is None else values:
            ranks, c = origin(int(value))
            for i, k in enumerate(ranks):  # a sum: one stripe per rank in it
                ax.add_patch(Rectangle((x0 + c, y + 0.9 * i / len(ranks)), 0.9,
                                       0.9 / len(ranks), color=PALETTE[k], lw=0))


def panel(ax, op: str) -> None:
    grid(ax, inputs(op), 0)
    grid(ax, outputs(op), P + 1.6)
    ax.add_patch(FancyArrowPatch((P + 0.1, P / 2 - 0.05), (P + 1.4, P / 2 - 0.05),
                                 arrowstyle="-|>", mutation_scale=9, lw=1, color="0.3"))
    for r in range(P):
        ax.text(-0.2, P - 1 - r + 0.45, f"rank {r}", ha="right", va="center",
                fontsize=FONT)
    ax.set_title(op, fontsize=FONT + 1, loc="left", x=0.1)
    frame(ax)


def frame(ax) -> None:
    ax.set_xlim(-2.3, 2 * P + 1.6)
    ax.set_ylim(-0.2, P)
    ax.set_aspect("equal")
    ax.axis("off")


def legend(ax) -> None:
    """Which colour is which rank, and what a striped block means."""
    for r in range(P):
        ax.add_patch(Rectangle((0, P - 1 - r), 0.9, 0.9, color=PALETTE[r], lw=0))
        ax.text(1.2, P - 1 - r + 0.45, f"a block of rank {r}", va="center", fontsize=FONT)
    x = 2 * P - 2.4
    for k in range(P):
        ax.add_patch(Rectangle((x, P - 1 + 0.9 * k / P), 0.9, 0.9 / P, color=PALETTE[k],
                               lw=0))
    ax.text(x + 0.45, P - 1.2, "the sum of\nall ranks'\nblocks", ha="center", va="top",
            fontsize=FONT)
    frame(ax)


def collectives_figure():
    fig, axes = plt.subplots(4, 2, figsize=(7.0, 6.0))
    for ax, op in zip(axes.flat, OPS):
        panel(ax, op)
    legend(axes.flat[len(OPS)])
    return fig


def figures() -> dict[str, bytes]:
    """Every figure of the chapter: file name -> SVG bytes."""
    use_book_style()
    return {"collectives.svg": svg_bytes(collectives_figure())}


def main() -> None:
    write_figures(figures(), Path(__file__).resolve().parent)


if __name__ == "__main__":
    main()
