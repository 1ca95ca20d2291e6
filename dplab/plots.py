"""One figure style for the whole book: small, labelled, one palette."""
from __future__ import annotations

import matplotlib

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def use_book_style() -> None:
    """Set matplotlib defaults: about 400 px wide at 100 dpi, one font, the book palette."""
    matplotlib.rcParams.update(
        {
            "figure.figsize": (4.5, 3.0),
            "figure.dpi": 100,
            "savefig.dpi": 100,
            "font.size": 9,
            "font.family": "DejaVu Sans",
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
            "figure.constrained_layout.use": True,
        }
    )


def svg_bytes(fig) -> bytes:
    """The figure as SVG, the same bytes on every run (no date, fixed ids, text kept as text).

    The book's drawn figures (img/*/make_figures.py) are stored this way, so that
    tests/test_figures.py can redraw them and find a stored figure that no longer matches its code.
    """
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "dplab", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def write_figures(figures: dict[str, bytes], folder) -> None:
    """Write a make_figures.py script's figures() (file name -> bytes) into its folder, drawn
    off screen. Called from the script's main(), not at import: a chapter loads the script."""
    from pathlib import Path

    matplotlib.use("Agg")
    for name, data in figures.items():
        (Path(folder) / name).write_bytes(data)
