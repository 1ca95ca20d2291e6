"""Draw img/allreduce/ring_steps.png: what each rank holds after every ring step (p = 4).

Run from the repository root: .venv/bin/python img/allreduce/make_figures.py
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from dplab.plots import use_book_style

P = 4


def ring_states(p: int) -> list[tuple[str, np.ndarray]]:
    """After each step: for rank r and chunk c, how many ranks' contributions r holds."""
    have = np.ones((p, p), dtype=int)
    out = [("start", have.copy())]
    for s in range(p - 1):  # reduce-scatter: r sends chunk r-s to r+1, which adds it
        new = have.copy()
        for r in range(p):
            c = (r - s) % p
            new[(r + 1) % p, c] = have[(r + 1) % p, c] + have[r, c]
        have = new
        out.append((f"reduce-scatter {s + 1}", have.copy()))
    for s in range(p - 1):  # all-gather: r sends finished chunk r+1-s to r+1, which copies it
        new = have.copy()
        for r in range(p):
            c = (r + 1 - s) % p
            new[(r + 1) % p, c] = have[r, c]
        have = new
        out.append((f"all-gather {s + 1}", have.copy()))
    return out


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
