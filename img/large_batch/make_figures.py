"""Draw the figures of chapters/large_batch.md.

gradient_noise.svg: the squared error ‖g_b − G‖² of batch gradients of the MNIST MLP against
the batch size b, with tr Σ / b and the signal ‖G‖² (section "Why a larger global batch
changes optimisation"). Its draws are those of the chapter's first cell: the same model,
sizes, number of draws and generator seed. It computes in float64, so that no value crosses
a rounding of the SVG with the order of additions, which differs between machines.

noam.svg: the Noam schedule (section "Warm-up and the Noam schedule") for the paper's setting
and for Lab 6's, drawn with Lab 6's own `noam` and constants (labcode.transformer): a figure
script may use a later lab's code, the chapter's cells may not.

Run from the repository root: .venv/bin/python img/large_batch/make_figures.py
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from dplab.data import load_mnist
from dplab.models import mlp
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.transformer import D_MODEL, NOAM_FACTOR, PAPER_D_MODEL, PAPER_WARMUP, WARMUP, noam

HERE = Path(__file__).resolve().parent
FONT = 8

# ---------------------------------------------------------------------------------------
# gradient_noise.svg: as the chapter's first cell measures it.
NOISE_SIZES, NOISE_DRAWS, NOISE_SEED = (8, 32, 128, 512), 24, 0


def noise_draws() -> tuple[dict[int, list[float]], float, int]:
    """‖g_b − G‖² of NOISE_DRAWS batches of each size (drawn without replacement), ‖G‖², N."""
    data = load_mnist()
    x, y = data.x_train.double(), data.y_train
    n = len(y)
    net = mlp(seed=0).double()

    def grad(rows: torch.Tensor) -> torch.Tensor:
        net.zero_grad()
        F.cross_entropy(net(x[rows]), y[rows]).backward()
        return torch.cat([q.grad.reshape(-1) for q in net.parameters()])

    full = grad(torch.arange(n))
    gen = torch.Generator().manual_seed(NOISE_SEED)
    errors = {b: [float((grad(torch.randperm(n, generator=gen)[:b]) - full).pow(2).sum())
                  for _ in range(NOISE_DRAWS)] for b in NOISE_SIZES}
    return errors, float(full.pow(2).sum()), n


def rounded(v: float, digits: int = 6) -> float:
    """v to `digits` significant digits: what the SVG holds must not depend on the last bits."""
    return float(f"{v:.{digits - 1}e}")


def gradient_noise() -> plt.Figure:
    errors, signal, n = noise_draws()
    # tr Σ as the chapter estimates it: b·E‖g_b − G‖², corrected for drawing without
    # replacement from n samples, averaged over the sizes
    trace = rounded(float(np.mean([b * np.mean(e) * (n - 1) / (n - b)
                                   for b, e in errors.items()])))
    signal = rounded(signal)
    b_simple = trace / signal
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    for i, (b, e) in enumerate(errors.items()):
        ax.scatter([b] * len(e), [rounded(v) for v in e], s=9, color=PALETTE[0], alpha=0.35,
                   linewidths=0, label="one batch" if i == 0 else None)
        ax.scatter([b], [rounded(float(np.mean(e)))], s=40, facecolors="none",
                   edgecolors=PALETTE[0], linewidths=1.4, label="mean" if i == 0 else None)
    bs = np.geomspace(2, 2048, 50)
    ax.plot(bs, trace / bs, "--", color=PALETTE[1], label=r"noise: tr$\,\Sigma\,/\,b$")
    ax.axhline(signal, ls=":", color=PALETTE[2], lw=1.5, label=r"signal: $\|G\|^2$")
    ax.axvline(b_simple, color="0.5", lw=0.8)
    ax.annotate(r"$B_\mathrm{simple}$", (b_simple, trace / 2048 * 1.5), xytext=(5, 0),
                textcoords="offset points", fontsize=FONT + 1, color="0.3")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(bs[0], bs[-1])
    ticks = [int(b) for b in 2.0 ** np.arange(1, 12, 2)]
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch size b (samples)", fontsize=FONT + 1)
    ax.set_ylabel(r"squared error $\|g_b - G\|^2$", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT, loc="upper right")
    ax.set_title(f"MNIST MLP at its initial weights; G: the gradient on all {n:,} images",
                 fontsize=FONT + 1, loc="left")
    return fig


# ---------------------------------------------------------------------------------------
# noam.svg: the paper's setting and Lab 6's.
NOAM_LAST_STEP = 20_000


def noam_figure() -> plt.Figure:
    settings = {f"d = {PAPER_D_MODEL}, w = {PAPER_WARMUP} (Vaswani et al.)":
                    (PAPER_D_MODEL, PAPER_WARMUP, 1.0),
                f"d = {D_MODEL}, w = {WARMUP}, f = {NOAM_FACTOR} (Lab 6)":
                    (D_MODEL, WARMUP, NOAM_FACTOR)}
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    for (label, (d, w, f)), colour in zip(settings.items(), PALETTE):
        # a log-spaced grid of steps, with the peak at w on it
        steps = np.union1d(np.unique(np.geomspace(1, NOAM_LAST_STEP, 300).round()), [w])
        rates = [noam(int(k), d, w, f) for k in steps]
        peak = noam(w, d, w, f)
        assert max(rates) == peak and math.isclose(noam(4 * w, d, w, f), peak / 2)
        ax.plot(steps, rates, color=colour, label=label)
        ax.plot([w], [peak], "o", color=colour, ms=4)
        ax.annotate(f"peak {peak:.2g} at s = w", (w, peak), xytext=(-4, 5), ha="right",
                    textcoords="offset points", fontsize=FONT, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1, NOAM_LAST_STEP)
    ax.set_ylim(top=0.03)             # room for the labels above the peaks
    ax.set_xlabel("optimizer step s", fontsize=FONT + 1)
    ax.set_ylabel("learning rate", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT, loc="lower center")
    return fig


def figures() -> dict[str, bytes]:
    """File name -> SVG bytes of every figure of the large-batch chapter."""
    use_book_style()
    return {"gradient_noise.svg": svg_bytes(gradient_noise()),
            "noam.svg": svg_bytes(noam_figure())}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
