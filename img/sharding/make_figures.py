"""Draw the sharding chapter's figures: what a rank holds under DDP and ZeRO; FSDP's timeline.

Both are drawn from the book's own functions: Lab 7's `model_state_bytes` (labcode.sharding;
a figure script may use a later lab's code, and the chapter checks the drawing against its own
eq-zero-memory) for the bytes, `half_ring` (labcode.formulas, the chapter's traffic section)
for the time of an all-gather or a reduce-scatter, with the α-β figures of dplab.hardware. The chapter glues its
worked numbers from this module's functions, so a caption cannot disagree with the drawing.
Run from the repository root: .venv/bin/python img/sharding/make_figures.py
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

import dplab.hardware as hw
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.formulas import half_ring
from labcode.sharding import ADAM_K, LOW_BYTES, STAGES, model_state_bytes

HERE = Path(__file__).resolve().parent

# --- ZeRO: who holds what ----------------------------------------------------------------
PSI = 7e9        # the chapter's 7B model
P = 4            # ranks drawn


def zero_parts(stage: int) -> list[tuple[str, int, bool]]:
    """(name, bytes per parameter, sharded?) of each part, as model_state_bytes counts them."""
    return [("parameters", LOW_BYTES, stage >= 3), ("gradients", LOW_BYTES, stage >= 2),
            ("optimizer state", ADAM_K, stage >= 1)]


def held_bytes(psi: float, p: int, stage: int) -> float:
    """The bytes a rank holds, summed from the drawn blocks: whole ones, and 1/p of sharded ones."""
    return sum(b * psi / (p if sharded else 1) for _, b, sharded in zero_parts(stage))


def zero_figure():
    fig, axes = plt.subplots(len(STAGES), 1, figsize=(7, 5.6), sharex=True)
    total = sum(b for _, b, _ in zero_parts(0))
    for ax, stage in zip(axes, STAGES):
        held = model_state_bytes(PSI, P, stage)
        assert math.isclose(held_bytes(PSI, P, stage), held), stage   # the drawing is the formula
        x = 0.0
        for (name, b, sharded), colour in zip(zero_parts(stage), PALETTE):
            for r in range(P):
                for c in range(P):
                    mine = not sharded or c == r
                    ax.add_patch(Rectangle((x + c * b / P, P - 1 - r + 0.1), b / P, 0.8,
                                           facecolor=colour if mine else "white",
                                           edgecolor="white" if mine else colour, lw=0.8))
            if ax is axes[0]:
                label = f"{name}, K = {b}" if name.startswith("optimizer") else name
                ax.text(x + b / 2, P - 0.5, label, ha="center", va="center", fontsize=8,
                        color="white")
            x += b
        ax.set_xlim(0, total)
        ax.set_ylim(0, P)
        ax.set_yticks([P - 1 - r + 0.5 for r in range(P)], [f"rank {r}" for r in range(P)],
                      fontsize=8)
        ax.tick_params(length=0)
        ax.grid(False)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.set_title(f"{STAGES[stage]}: {held / 1e9:.1f} GB per rank", fontsize=9, loc="left")
    axes[-1].set_xticks([0, LOW_BYTES, 2 * LOW_BYTES, total],
                        ["0", f"{LOW_BYTES}Ψ", f"{2 * LOW_BYTES}Ψ", f"{total}Ψ"], fontsize=8)
    axes[-1].set_xlabel(f"bytes of model state, Ψ = {PSI / 1e9:.0f}B parameters, p = {P}: "
                        "filled = held by that rank", fontsize=8)
    return fig


# --- FSDP: all-gather, compute, free, layer by layer -----------------------------------------
UNITS = 4                     # units drawn (one fully_shard call each)
UNIT_PARAMS = PSI / 32        # each a block of the 7B model with 32 blocks
P_FSDP = 64                   # ranks, over InfiniBand (the chapter's p for that fabric)
TOKENS = 8192                 # tokens per rank and step (B sequences times their length)


def gather_seconds() -> float:
    """One unit's all-gather (or its gradient's reduce-scatter): half a ring of its 16-bit bytes."""
    return half_ring(LOW_BYTES * UNIT_PARAMS, P_FSDP).time(hw.ALPHA, hw.infiniband_beta())


def forward_seconds() -> float:
    """One unit's forward: 2 FLOPs per parameter and token, at the assumed fraction of bf16 peak."""
    return 2 * UNIT_PARAMS * TOKENS / (hw.H100_BF16_DENSE_FLOPS * hw.MFU_ASSUMED)


class Op(NamedTuple):
    lane: str       # "network" or "compute"
    kind: str       # AG, F, B or RS
    unit: int
    start: float
    end: float


def fsdp_schedule(prefetch: bool) -> list[Op]:
    """One step in virtual time: the network runs one collective at a time, in the order issued.

    Without prefetch a unit's all-gather is issued when the compute reaches the unit; with
    it, when the previous unit's compute starts (one unit ahead, as the chapter describes
    FSDP2). After a unit's backward its gradient is reduce-scattered.
    """
    ag, fwd = gather_seconds(), forward_seconds()
    ops, net, cpu = [], 0.0, 0.0

    def comm(kind, unit, issued):
        nonlocal net
        ops.append(Op("network", kind, unit, max(net, issued), max(net, issued) + ag))
        net = ops[-1].end
        return net

    def compute(kind, unit, ready, seconds):
        nonlocal cpu
        ops.append(Op("compute", kind, unit, max(cpu, ready), max(cpu, ready) + seconds))
        cpu = ops[-1].end

    passes = ((list(range(UNITS)), "F", fwd), (list(range(UNITS))[::-1], "B", 2 * fwd))
    for order, kind, seconds in passes:
        ready = comm("AG", order[0], cpu)
        for k, unit in enumerate(order):
            start = max(cpu, ready)
            nxt = order[k + 1] if k + 1 < len(order) else None
            if prefetch and nxt is not None:
                ready_next = comm("AG", nxt, start)
            compute(kind, unit, ready, seconds)
            if kind == "B":
                comm("RS", unit, cpu)
            if nxt is not None:
                ready = ready_next if prefetch else comm("AG", nxt, cpu)
    return ops


def gathered_units(ops: list[Op]) -> list[tuple[float, int]]:
    """(time, units gathered whole) at each change: from its all-gather to its compute's end."""
    events = []
    gathers = [op for op in ops if op.kind == "AG"]
    computes = [op for op in ops if op.lane == "compute"]
    for g, c in zip(gathers, sorted(computes, key=lambda op: op.start)):
        assert g.unit == c.unit
        events += [(g.start, 1), (c.end, -1)]
    level, out = 0, [(0.0, 0)]
    for t, step in sorted(events):
        level += step
        out.append((t, level))
    return out


def step_seconds(prefetch: bool) -> float:
    """The step's time: until its last collective or compute ends."""
    return max(op.end for op in fsdp_schedule(prefetch))


def peak_gathered_bytes(prefetch: bool) -> float:
    """The most bytes of parameters gathered whole at one time (16-bit)."""
    return max(n for _, n in gathered_units(fsdp_schedule(prefetch))) * LOW_BYTES * UNIT_PARAMS


def fsdp_figure():
    colours = {"AG": PALETTE[0], "RS": PALETTE[3], "F": PALETTE[2], "B": PALETTE[1]}
    fig, axes = plt.subplots(4, 1, figsize=(7, 4.8), sharex=True,
                             gridspec_kw={"height_ratios": [1, 0.55, 1, 0.55]})
    gb = LOW_BYTES * UNIT_PARAMS / 1e9
    for k, prefetch in enumerate((False, True)):
        ops = fsdp_schedule(prefetch)
        ax, mem = axes[2 * k], axes[2 * k + 1]
        for op in ops:
            y = 1 if op.lane == "network" else 0
            ax.add_patch(Rectangle((1e3 * op.start, y + 0.12), 1e3 * (op.end - op.start), 0.76,
                                   facecolor=colours[op.kind], edgecolor="white", lw=0.8))
            ax.text(1e3 * (op.start + op.end) / 2, y + 0.5, f"{op.kind}{op.unit + 1}",
                    ha="center", va="center", fontsize=8, color="white")
        ax.set_ylim(0, 2)
        ax.set_yticks([0.5, 1.5], ["compute", "network"], fontsize=8)
        ax.tick_params(length=0)
        ax.grid(False)
        title = "with prefetch (the next all-gather during this compute)" if prefetch \
            else "without prefetch"
        ax.set_title(f"{title}: step {1e3 * step_seconds(prefetch):.0f} ms",
                     fontsize=9, loc="left")
        levels = gathered_units(ops)
        mem.step([1e3 * t for t, _ in levels], [n * gb for _, n in levels], where="post",
                 color="black", lw=1)
        peak = peak_gathered_bytes(prefetch) / 1e9
        t_peak = next(t for t, n in levels if n * gb == peak)
        mem.plot([1e3 * t_peak], [peak], "o", color=PALETTE[3], ms=4)
        units = round(peak / gb)
        mem.annotate(f"peak: {units} unit{'s' if units > 1 else ''} gathered, {peak:.2f} GB",
                     (1e3 * t_peak, peak), xytext=(5, 1), textcoords="offset points",
                     fontsize=8, va="bottom")
        mem.set_ylim(0, 2.4 * gb)
        mem.set_yticks([0, gb, 2 * gb], ["0", f"{gb:.2f}", f"{2 * gb:.2f}"], fontsize=8)
        mem.set_ylabel("gathered\n(GB)", fontsize=8)
    end = 1e3 * step_seconds(False)
    axes[-1].set_xlim(0, end * 1.01)
    axes[-1].set_xlabel(f"time (ms); AG all-gather, F forward, B backward, RS reduce-scatter "
                        f"of unit i; p = {P_FSDP}, InfiniBand", fontsize=8)
    return fig


def figures() -> dict[str, bytes]:
    use_book_style()
    return {"zero_stages.svg": svg_bytes(zero_figure()),
            "fsdp_timeline.svg": svg_bytes(fsdp_figure())}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
