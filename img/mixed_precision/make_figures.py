"""Draw the figures of chapters/mixed_precision.md.

fp16_range.svg: the range of fp32, bf16 and fp16 (torch.finfo), and a histogram of the
MLP's gradient values as they are and times GradScaler's initial loss scale, sorted by the
chapter's own cast_fractions and loss_scale_range (section "Why fp16 gradients underflow,
and loss scaling"); the chapter checks that the legend shows the shares it quotes. It
computes in float64, so that no value crosses a bin edge with the order of additions, which
differs between machines.

Run from the repository root: .venv/bin/python img/mixed_precision/make_figures.py
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.patches import ConnectionPatch, Rectangle

from dplab.data import load_mnist
from dplab.models import mlp
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.formulas import FP16_GRAD_SAMPLES, cast_fractions, loss_scale_range

HERE = Path(__file__).resolve().parent
FONT = 8

FORMATS = (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16))
ZOOM = (-40, 22)  # log2 of the magnitudes in the lower panel
BIN = 0.5  # histogram bins, in log2


def gradient_values() -> torch.Tensor:
    """The chapter's gradients: the MNIST MLP (seed 0, float64) on its first training images."""
    data = load_mnist()
    model = mlp(seed=0).double()
    samples = slice(0, FP16_GRAD_SAMPLES)
    F.cross_entropy(model(data.x_train[samples].double()), data.y_train[samples]).backward()
    return torch.cat([q.grad.reshape(-1) for q in model.parameters()])


def initial_loss_scale() -> float:
    """GradScaler's default init_scale, read from the installed torch."""
    return inspect.signature(torch.amp.GradScaler.__init__).parameters["init_scale"].default


def power(e: float) -> str:
    """2 to the power e, written 2^e in mathtext."""
    return f"$2^{{{e:.0f}}}$" if float(e).is_integer() else f"$2^{{{e:.1f}}}$"


def fp16_range() -> plt.Figure:
    g = gradient_values()
    scale = initial_loss_scale()
    logs = {1.0: torch.log2(g[g != 0].abs()).numpy()}
    logs[scale] = logs[1.0] + math.log2(scale)  # exact: the scale is a power of two
    fig, (top, low) = plt.subplots(2, 1, figsize=(6.6, 5.6), height_ratios=[1, 2.1],
                                   layout="constrained")
    # top: each format's range, subnormals light, normal numbers dark
    for row, (name, dt) in enumerate(FORMATS):
        fi = torch.finfo(dt)
        sub, normal, top_value = (math.log2(fi.smallest_normal * fi.eps),
                                  math.log2(fi.smallest_normal), math.log2(fi.max))
        top.barh(row, normal - sub, left=sub, height=0.55, color=PALETTE[0], alpha=0.35)
        top.barh(row, top_value - normal, left=normal, height=0.55, color=PALETTE[0])
        top.text(sub - 3, row, power(sub), ha="right", va="center", fontsize=FONT)
        largest = f"{fi.max:,.0f}" if fi.max < 1e6 else f"{fi.max:.3g}"
        top.text(top_value + 3, row, largest, ha="left", va="center", fontsize=FONT)
    top.set_yticks(range(len(FORMATS)), [name for name, _ in FORMATS], fontsize=FONT + 1)
    top.set_xlim(-200, 175)
    top.set_ylim(-0.6, len(FORMATS) - 0.4)
    top.set_xticks(range(-150, 151, 50), [power(e) for e in range(-150, 151, 50)],
                   fontsize=FONT)
    top.grid(axis="y", visible=False)
    top.add_patch(Rectangle((ZOOM[0], -0.5), ZOOM[1] - ZOOM[0], len(FORMATS) - 0.1,
                            fill=False, ls="--", lw=0.8, color="0.3"))
    top.set_title("the magnitudes each format holds: subnormal (light), normal (dark), largest",
                  fontsize=FONT + 1, loc="left")
    # bottom: fp16's zones, and the gradients before and after scaling
    fi = torch.finfo(torch.float16)
    flush, overflow = (math.log2(v) for v in loss_scale_range(torch.float16, 1.0))
    normal = math.log2(fi.smallest_normal)
    zones = [(ZOOM[0], flush, PALETTE[3], 0.14, "→ 0"),
             (flush, normal, PALETTE[1], 0.14, "subnormal"),
             (normal, overflow, "white", 0.0, "normal"),
             (overflow, ZOOM[1], PALETTE[3], 0.14, "→ inf")]
    for lo, hi, color, alpha, label in zones:
        low.axvspan(lo, hi, color=color, alpha=alpha, lw=0)
        low.text((lo + hi) / 2, 0.97, label, transform=low.get_xaxis_transform(),
                 ha="center", va="top", fontsize=FONT)
    bins = np.arange(ZOOM[0], ZOOM[1] + BIN, BIN)
    for (s, values), color in zip(logs.items(), (PALETTE[0], PALETTE[2])):
        shares = cast_fractions(g, torch.float16, s)
        counts, _ = np.histogram(values, bins)
        who = "as they are" if s == 1 else f"times S = {s:.0f}"
        low.stairs(counts, bins, color=color, lw=1.5,
                   label=f"{who}: subnormal {100 * shares['subnormal']:.2g} %, "
                         f"zero {100 * shares['zero']:.2g} %, inf {100 * shares['inf']:.2g} %")
    low.set_yscale("log")
    low.set_ylim(0.5, 40 * max(np.histogram(logs[1.0], bins)[0]))
    peak = bins[np.argmax(np.histogram(logs[1.0], bins)[0])] + BIN / 2
    low.annotate("", (peak + math.log2(scale), 1e5), (peak, 1e5),
                 arrowprops={"arrowstyle": "->", "color": "0.3", "lw": 1})
    low.text(peak + math.log2(scale) / 2, 1.3e5, f"× S = {power(math.log2(scale))}",
             ha="center", va="bottom", fontsize=FONT)
    low.set_xlim(*ZOOM)
    ticks = range(-40, 21, 5)
    low.set_xticks(ticks, [power(e) for e in ticks], fontsize=FONT)
    low.tick_params(axis="y", labelsize=FONT)
    low.set_xlabel("magnitude (log₂ scale); shaded: what fp16 makes of it", fontsize=FONT + 1)
    low.set_ylabel(f"gradient values per {BIN:g} of log₂", fontsize=FONT + 1)
    low.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.2),
               title=f"gradients of the MNIST MLP on {FP16_GRAD_SAMPLES} images, cast to fp16",
               title_fontsize=FONT)
    for x in ZOOM:  # tie the zoomed window to its place on the top line
        fig.add_artist(ConnectionPatch((x, -0.5), (x, 1.0), coordsA=top.transData,
                                       coordsB=low.get_xaxis_transform(), ls="--", lw=0.8,
                                       color="0.3"))
    return fig


def figures() -> dict[str, bytes]:
    """File name -> SVG bytes of every figure of the mixed-precision chapter."""
    use_book_style()
    return {"fp16_range.svg": svg_bytes(fp16_range())}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
