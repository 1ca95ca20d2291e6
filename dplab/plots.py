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


# The takeaway box under a lab's Measure plot: its colour, and the columns of its plain text.
TAKEAWAY_COLOUR = (44, 160, 44)  # PALETTE[2], as r, g, b
TAKEAWAY_COLUMNS = 80


def rounded(x: float, digits: int = 2) -> str:
    """`x` to `digits` significant figures, with no exponent: 45.3 -> "45", 0.0234 -> "0.023",
    1234 -> "1,200". For a takeaway's measured values, which are not worth more digits."""
    import math

    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    exponent = math.floor(math.log10(abs(x)))
    value = round(x, digits - 1 - exponent)
    if value and abs(value) >= 10 ** (exponent + 1):  # 9.96 -> 10
        exponent += 1
    return f"{value:,.{max(0, digits - 1 - exponent)}f}"


def takeaway(text: str, title: str = "On this machine") -> None:
    """Show what a Measure plot showed on this run, in a box under it.

    `text` is a sentence or two built from the values just measured (never typed), rounded to
    what the measurement supports. The box is HTML with inline styles, which JupyterLab keeps
    in a stored notebook and the book renders as it is (the class `admonition` gives it the
    book's shadow); a viewer without HTML shows the plain text, wrapped at TAKEAWAY_COLUMNS.
    Its values change from run to run: call it in a cell tagged nbval-ignore-output.
    """
    import html
    import textwrap

    from IPython.display import display

    r, g, b = TAKEAWAY_COLOUR
    box = (f"border-left: 0.2rem solid rgb({r}, {g}, {b}); border-radius: 0.25rem; "
           f"padding: 0 0.6rem 0.5rem; margin: 0.5rem 0; "
           f"background-color: rgba({r}, {g}, {b}, 0.07)")
    head = (f"margin: 0 -0.6rem; padding: 0.3rem 0.6rem; font-weight: bold; "
            f"background-color: rgba({r}, {g}, {b}, 0.15)")
    markup = (f'<div class="admonition dplab-takeaway" style="{box}">'
              f'<p style="{head}">{html.escape(title)}</p>'
              f'<p style="margin: 0.4rem 0 0">{html.escape(text)}</p></div>')
    plain = textwrap.fill(f"{title}: {text}", TAKEAWAY_COLUMNS, break_on_hyphens=False)
    display({"text/html": markup, "text/plain": plain}, raw=True)
