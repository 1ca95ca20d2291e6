"""Draw the stragglers chapter's figures: synchronous steps that wait; an asynchronous server.

Both use Lab 8's injected straggler (`straggler_delay`, labcode.stragglers, with the lab's seed:
the delays the lab injects), and the server replays `ps_server`'s asynchronous rule in virtual
time; its staleness is checked against the chapter's `staleness_total` (labcode.formulas).
The chapter glues its worked numbers from this module's functions.
Run from the repository root: .venv/bin/python img/stragglers/make_figures.py
"""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

import labcode.costmodel as cm
from dplab.models import gradient_bytes, mlp
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.formulas import staleness_total
from labcode.stragglers import straggler_delay

HERE = Path(__file__).resolve().parent

# --- Synchronous steps: everyone waits for the slowest rank --------------------------------
P = 4              # ranks drawn (the chapter's P_FEW)
STEPS = 6          # the first steps of Lab 8's injected straggler
COMPUTE = 0.050    # seconds of compute per rank and step: an assumption for the drawing


def allreduce_seconds() -> float:
    """The MLP's gradient, ring all-reduce on Lab 3's what-if fabric (1 Gb/s, α = 50 µs)."""
    return cm.cost("ring", gradient_bytes(mlp()), P).time(50e-6, 1 / 125e6)


def sync_delays() -> list[list[float]]:
    """delays[s][r]: what Lab 8 injects on rank r in step s (its seed, its q and d)."""
    return [[straggler_delay(r, s) for r in range(P)] for s in range(STEPS)]


def sync_figure():
    delays, reduce = sync_delays(), allreduce_seconds()
    fig, ax = plt.subplots(figsize=(7, 2.4))
    t = 0.0
    for s, row in enumerate(delays):
        wait = max(row)
        for r, d in enumerate(row):
            y = P - 1 - r
            parts = [(COMPUTE, PALETTE[0], None), (d, PALETTE[3], "////"),
                     (wait - d, "0.9", None), (reduce, PALETTE[2], None)]
            x = t
            for width, colour, hatch in parts:
                if width > 0:
                    ax.add_patch(Rectangle((1e3 * x, y + 0.15), 1e3 * width, 0.7,
                                           facecolor=colour, hatch=hatch, edgecolor="white",
                                           lw=0.5))
                x += width
        label = f"step {s + 1}" + (f": +{1e3 * wait:.0f} ms" if wait > 0 else "")
        ax.text(1e3 * (t + (COMPUTE + wait + reduce) / 2), P + 0.05, label, ha="center",
                va="bottom", fontsize=8, color=PALETTE[3] if wait > 0 else "black")
        t += COMPUTE + wait + reduce
    ax.set_xlim(0, 1e3 * t)
    ax.set_ylim(0, P + 0.5)
    ax.set_yticks([P - 1 - r + 0.5 for r in range(P)], [f"rank {r}" for r in range(P)],
                  fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.grid(False)
    ax.set_xlabel("time (ms): compute (blue), the injected sleep (hatched), "
                  "waiting (grey), all-reduce (green)", fontsize=8)
    return fig


# --- The asynchronous parameter server -------------------------------------------------------
WORKERS = 3                          # ranks 1..3 of Lab 8's p = 4; rank 0 serves
UPDATES = 12                         # gradients the server hands out and applies
WORKER_COMPUTE = (0.020, 0.025, 0.030)   # seconds per gradient: workers of different speeds


class Gradient(NamedTuple):
    worker: int         # its rank, 1..WORKERS
    seq: int            # the worker's i-th gradient
    pulled_at: float    # seconds
    pushed_at: float
    pulled: int         # the version it was computed on
    applied: int        # the version the server was at when it applied it
    delay: float        # the injected sleep

    @property
    def staleness(self) -> int:
        return self.applied - self.pulled


def async_server(workers: int = WORKERS, updates: int = UPDATES) -> list[Gradient]:
    """ps_server's asynchronous rule in virtual time, pushes and pulls taking no time.

    It hands out min(W, G) pulls at once, applies each gradient as it arrives and answers
    with fresh parameters until G pulls are issued; worker j's i-th gradient takes its
    compute time plus straggler_delay(j, i), as run_ps injects it in Lab 8.
    """
    def took(j, i):
        return WORKER_COMPUTE[j - 1] + straggler_delay(j, i)

    issued = min(workers, updates)
    events = [(took(j, 0), j, 0, 0.0, 0) for j in range(1, issued + 1)]
    heapq.heapify(events)
    version, log = 0, []
    while version < updates:
        t, j, i, t0, used = heapq.heappop(events)
        log.append(Gradient(j, i, t0, t, used, version, straggler_delay(j, i)))
        version += 1
        if issued < updates:
            issued += 1
            heapq.heappush(events, (t + took(j, i + 1), j, i + 1, t, version))
    assert sum(g.staleness for g in log) == staleness_total(updates, workers)
    return log


def stalest(log: list[Gradient]) -> Gradient:
    """The gradient drawn with its staleness: the stalest, the first of them if several."""
    return max(log, key=lambda g: (g.staleness, -g.pushed_at))


def ps_figure():
    log = async_server()
    mark = stalest(log)
    fig, ax = plt.subplots(figsize=(7, 3.0))
    server_y = WORKERS + 1.1
    for g in log:
        y = WORKERS - g.worker
        compute = WORKER_COMPUTE[g.worker - 1]
        edge = "black" if g is mark else "white"
        ax.add_patch(Rectangle((1e3 * g.pulled_at, y + 0.15), 1e3 * compute, 0.7,
                               facecolor=PALETTE[0], edgecolor=edge, lw=1))
        if g.delay:
            ax.add_patch(Rectangle((1e3 * (g.pulled_at + compute), y + 0.15), 1e3 * g.delay,
                                   0.7, facecolor=PALETTE[3], hatch="////", edgecolor=edge,
                                   lw=1))
        ax.text(1e3 * g.pulled_at + 1, y + 0.5, f"w{g.pulled}", ha="left", va="center",
                fontsize=8, color="white")
        ax.plot([1e3 * g.pushed_at] * 2, [y + 0.85, server_y], color="0.6", lw=0.6, zorder=0)
    pushes: dict[float, list[int]] = {}
    for v, g in enumerate(log, start=1):          # the update to version v is g's
        pushes.setdefault(round(g.pushed_at, 9), []).append(v)   # one label per instant
    for t, versions in pushes.items():
        inside = mark.pulled < versions[0] <= mark.applied
        colour = PALETTE[3] if inside else "black"
        ax.plot(1e3 * t, server_y, "o", ms=4, color=colour)
        ax.text(1e3 * t, server_y + 0.15, ",".join(f"w{v}" for v in versions), ha="center",
                va="bottom", fontsize=8, color=colour)
    y = WORKERS + 0.4
    for t in (mark.pulled_at, mark.pushed_at):
        ax.plot([1e3 * t] * 2, [WORKERS - mark.worker + 0.85, server_y], color="black",
                lw=1, ls="--")
    ax.annotate("", (1e3 * mark.pushed_at, y), (1e3 * mark.pulled_at, y),
                arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1})
    ax.text(1e3 * (mark.pulled_at + mark.pushed_at) / 2, y + 0.05,
            f"worker {mark.worker}'s gradient of w{mark.pulled} is applied to "
            f"w{mark.applied}: τ = {mark.staleness}", ha="center", va="bottom", fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    end = 1e3 * log[-1].pushed_at
    ax.set_xlim(0, end * 1.03)
    ax.set_ylim(0, server_y + 0.7)
    ax.set_yticks([server_y] + [WORKERS - j + 0.5 for j in range(1, WORKERS + 1)],
                  ["server"] + [f"worker {j}" for j in range(1, WORKERS + 1)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.grid(False)
    ax.set_xlabel("time (ms): a bar is one gradient, from its pull (wv: the version it "
                  "got) to its push; hatched: the injected sleep", fontsize=8)
    return fig


def figures() -> dict[str, bytes]:
    use_book_style()
    return {"sync_steps.svg": svg_bytes(sync_figure()),
            "parameter_server.svg": svg_bytes(ps_figure())}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
