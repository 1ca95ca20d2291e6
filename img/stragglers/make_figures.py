"""Draw the stragglers chapter's figures: synchronous steps that wait; one step with a backup
worker; local SGD against averaging every step; an asynchronous server.

All draw the chapter's straggler (`straggler_delay` below: each rank sleeps D with probability Q
in a step, seeded by rank and step, the rule Lab 8 later writes and injects). The server replays
Lab 8's asynchronous rule in virtual time; its staleness is checked against the chapter's
`staleness_total` (labcode.formulas). The chapter glues its worked numbers from this module.
Run from the repository root: .venv/bin/python img/stragglers/make_figures.py
"""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

import labcode.costmodel as cm
from dplab.models import gradient_bytes, mlp
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.formulas import staleness_total

HERE = Path(__file__).resolve().parent

# --- The straggler ------------------------------------------------------------------------------
Q = 0.1            # probability that a rank straggles in a step
D = 0.030          # seconds that a straggling rank sleeps


def straggler_delay(rank: int, step: int, q: float = Q, d: float = D, seed: int = 0) -> float:
    """The sleep of `rank` in `step`: d with probability q, else 0, the same on every run."""
    return d if np.random.default_rng([seed, rank, step]).random() < q else 0.0


# --- Synchronous steps: everyone waits for the slowest rank --------------------------------
P = 4              # ranks drawn (the chapter's P_FEW)
STEPS = 6          # the first steps of the straggler
COMPUTE = 0.050    # seconds of compute per rank and step: an assumption for the drawing


def allreduce_seconds() -> float:
    """The MLP's gradient, ring all-reduce on Lab 3's what-if fabric (1 Gb/s, α = 50 µs)."""
    return cm.cost("ring", gradient_bytes(mlp()), P).time(50e-6, 1 / 125e6)


def sync_delays(steps: int = STEPS) -> list[list[float]]:
    """delays[s][r]: the straggler's sleep on rank r in step s."""
    return [[straggler_delay(r, s) for r in range(P)] for s in range(steps)]


def bar(ax, x, y, width, colour, hatch=None, **style):
    """One phase of a rank's row: from x for width seconds, drawn in ms."""
    if width > 1e-12:          # not a rounding error's sliver
        ax.add_patch(Rectangle((1e3 * x, y + 0.15), 1e3 * width, 0.7, facecolor=colour,
                               hatch=hatch, edgecolor=style.pop("edgecolor", "white"),
                               lw=style.pop("lw", 0.5), **style))


def rank_axis(ax, end, top=P + 0.5):
    """Rows named by rank, time from 0 to `end` seconds."""
    ax.set_xlim(0, 1e3 * end)
    ax.set_ylim(0, top)
    ax.set_yticks([P - 1 - r + 0.5 for r in range(P)], [f"rank {r}" for r in range(P)],
                  fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.grid(False)


def draw_sync(ax, delays, label) -> float:
    """Synchronous steps: compute, sleep, wait for the slowest, all-reduce. Returns the end."""
    reduce = allreduce_seconds()
    t = 0.0
    for s, row in enumerate(delays):
        wait = max(row)
        for r, d in enumerate(row):
            x = t
            for width, colour, hatch in [(COMPUTE, PALETTE[0], None),
                                         (d, PALETTE[3], "////"), (wait - d, "0.9", None),
                                         (reduce, PALETTE[2], None)]:
                bar(ax, x, P - 1 - r, width, colour, hatch)
                x += width
        ax.text(1e3 * (t + (COMPUTE + wait + reduce) / 2), P + 0.05, label(s, wait),
                ha="center", va="bottom", fontsize=8,
                color=PALETTE[3] if wait > 0 else "black")
        t += COMPUTE + wait + reduce
    return t


LEGEND = "compute (blue), the injected sleep (hatched), waiting (grey), "


def sync_figure():
    fig, ax = plt.subplots(figsize=(7, 2.4))
    end = draw_sync(ax, sync_delays(), lambda s, wait: f"step {s + 1}"
                    + (f": +{1e3 * wait:.0f} ms" if wait > 0 else ""))
    rank_axis(ax, end)
    ax.set_xlabel(f"time (ms): {LEGEND}all-reduce (green)", fontsize=8)
    return fig


# --- Backup workers: the step takes the first p - k gradients ----------------------------------
BACKUP_K = 1       # backup workers: the gradients the step drops


def backup_step(delays: list[float], k: int = BACKUP_K) -> tuple[float, list[int]]:
    """One step's wait and the ranks it keeps: the p - k that finish first (lowest rank first)."""
    kept = sorted(sorted(range(len(delays)), key=lambda r: delays[r])[:len(delays) - k])
    return max(delays[r] for r in kept), kept


def backup_figure():
    """sync_delays()'s first step, without and with BACKUP_K backup workers."""
    row, reduce = sync_delays()[0], allreduce_seconds()
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.1), sharex=True, sharey=True)
    end = COMPUTE + max(row) + reduce
    for ax, k in zip(axes, (0, BACKUP_K)):
        wait, kept = backup_step(row, k)
        for r, d in enumerate(row):
            y = P - 1 - r
            bar(ax, 0, y, COMPUTE, PALETTE[0])
            if r in kept:
                for x, width, colour, hatch in [(COMPUTE, d, PALETTE[3], "////"),
                                                (COMPUTE + d, wait - d, "0.9", None),
                                                (COMPUTE + wait, reduce, PALETTE[2], None)]:
                    bar(ax, x, y, width, colour, hatch)
            else:
                bar(ax, COMPUTE, y, d, PALETTE[3], "////", alpha=0.35)
                ax.text(1e3 * (COMPUTE + d / 2), y + 0.5, "dropped", ha="center",
                        va="center", fontsize=8)
        took = f"{1e3 * (COMPUTE + wait + reduce):.0f} ms"
        ax.set_title(f"k = 0: it waits for all p = {P} gradients, {took}" if k == 0 else
                     f"k = {k}: it averages the first p − k = {len(kept)}, {took}", fontsize=8)
        rank_axis(ax, end * 1.02, P)
    fig.supxlabel(f"time (ms): {LEGEND}averaging the kept gradients (green)", fontsize=8)
    return fig


# --- Local SGD: average every H steps ----------------------------------------------------------
LOCAL_H = 4        # steps between averages
LOCAL_STEPS = 8    # two rounds


def local_waits(delays, H: int = LOCAL_H) -> list[float]:
    """Each round's wait: the largest sum of one rank's sleeps over its H steps."""
    return [max(map(sum, zip(*delays[i:i + H]))) for i in range(0, len(delays), H)]


def local_figure():
    """The same sleeps, averaged every step (synchronous) and every LOCAL_H steps."""
    delays, reduce = sync_delays(LOCAL_STEPS), allreduce_seconds()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 3.8), sharex=True)
    end = draw_sync(top, delays, lambda s, wait: f"+{1e3 * wait:.0f} ms" if wait else "")
    top.set_title("averaging every step: each step waits for its slowest rank", fontsize=8,
                  loc="left")
    t = 0.0
    for i, wait in enumerate(local_waits(delays)):
        rounds = delays[i * LOCAL_H:(i + 1) * LOCAL_H]
        for r in range(P):
            x, y = t, P - 1 - r
            for row in rounds:
                bar(bottom, x, y, COMPUTE, PALETTE[0])
                bar(bottom, x + COMPUTE, y, row[r], PALETTE[3], "////")
                x += COMPUTE + row[r]
            bar(bottom, x, y, t + LOCAL_H * COMPUTE + wait - x, "0.9")
            bar(bottom, t + LOCAL_H * COMPUTE + wait, y, reduce, PALETTE[2])
        span = LOCAL_H * COMPUTE + wait + reduce
        bottom.text(1e3 * (t + span / 2), P + 0.05, f"round {i + 1}: +{1e3 * wait:.0f} ms",
                    ha="center", va="bottom", fontsize=8,
                    color=PALETTE[3] if wait > 0 else "black")
        t += span
    bottom.set_title(f"local SGD, H = {LOCAL_H}: each round waits for its slowest rank's sum",
                     fontsize=8, loc="left")
    for ax in (top, bottom):
        rank_axis(ax, end, P + 0.7)
    bottom.set_xlabel(f"time (ms): {LEGEND}all-reduce (green)", fontsize=8)
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
    compute time plus straggler_delay(j, i), as Lab 8 injects it.
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
            "backup_workers.svg": svg_bytes(backup_figure()),
            "local_sgd.svg": svg_bytes(local_figure()),
            "parameter_server.svg": svg_bytes(ps_figure())}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
