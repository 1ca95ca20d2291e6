"""Draw img/allreduce/ring_steps.png: what each rank holds after every ring step (p = 4).

Run from the repository root: .venv/bin/python img/allreduce/make_figures.py
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from dplab.localcomm import run_ranks
from dplab.plots import use_book_style
from labcode.allreduce import allreduce_ring

P = 4


class Recorder:
    """Forwards to a LocalComm and keeps a copy of this rank's x at the start of every Sendrecv."""

    def __init__(self, comm, x: np.ndarray):
        self.comm, self.x, self.states = comm, x, []

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    def Sendrecv(self, sendbuf, dest, recvbuf, source) -> None:
        self.states.append(self.x.copy())
        self.comm.Sendrecv(sendbuf, dest=dest, recvbuf=recvbuf, source=source)


def ring_states(p: int) -> list[tuple[str, np.ndarray]]:
    """Before each step and at the end: for rank r and chunk c, how many ranks' contributions r holds.

    Runs Lab 3's own allreduce_ring on p threads with x = ones(p): one element per chunk, so
    each element counts the contributions its rank has added into that chunk.
    """
    def rank(comm) -> list[np.ndarray]:
        x = np.ones(p, dtype=int)
        rec = Recorder(comm, x)
        allreduce_ring(rec, x)
        return rec.states + [x.copy()]

    per_rank = run_ranks(p, rank)  # per_rank[r][k]: rank r's x before step k (k = 2(p - 1): the end)
    titles = (["start"] + [f"reduce-scatter {s + 1}" for s in range(p - 1)]
              + [f"all-gather {s + 1}" for s in range(p - 1)])
    assert all(len(states) == len(titles) for states in per_rank)
    return [(title, np.stack([states[k] for states in per_rank])) for k, title in enumerate(titles)]


def main() -> None:
    use_book_style()
    states = ring_states(P)
    fig, axes = plt.subplots(1, len(states), figsize=(8, 2.0))
    for ax, (title, h) in zip(axes, states):
        ax.imshow(h, cmap="Blues", vmin=0, vmax=P)
        for r in range(P):
            for c in range(P):
                ax.text(c, r, str(h[r, c]), ha="center", va="center", fontsize=7,
                        color="white" if h[r, c] == P else "black")
        ax.set_title(title, fontsize=7)
        ax.set_xticks(range(P), [f"c{c}" for c in range(P)], fontsize=6)
        ax.set_yticks(range(P), [f"r{r}" for r in range(P)], fontsize=6)
        ax.grid(False)
    fig.suptitle("ring all-reduce, p = 4: contributions each rank (row) holds in each chunk (column)", fontsize=8)
    fig.savefig(os.path.join(os.path.dirname(__file__), "ring_steps.png"))


if __name__ == "__main__":
    main()
