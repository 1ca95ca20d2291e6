"""Draw img/intro/parts.svg: the book's parts in reading order, each chapter beside its labs.

Everything comes from _toc.yml (the parts, their order, which lab follows which chapter) and
from the pages (their titles), both read through booktools.pages, so the map shows the book as
it is. Run it after changing either: .venv/bin/python img/intro/make_figure.py
(tests/test_intro.py fails while the stored figure differs from what this script draws).
"""
from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from booktools.pages import Page, toc
from dplab.plots import PALETTE, use_book_style

OUT = Path(__file__).with_name("parts.svg")
REFERENCE = "Reference"  # the part whose pages are looked up, not read in order

# Layout in pixels at 100 dpi (the book's figures are about 400 px wide), y pointing down.
WIDTH = 440
LEFT, GAP, RIGHT = 26, 22, 6  # room for the reading-order arrow, the chapter -> lab arrows, margin
COLUMN = (WIDTH - LEFT - GAP - RIGHT) / 2  # a chapter box, or a lab box
LINE, PAD, HEADER, SPACE = 11, 6, 17, 3  # a line of text, its padding, a part's caption, a gap
FONT = 8
WRAP = 29  # characters per line in a box at FONT points


@dataclass
class Row:
    """A chapter and the labs listed after it in the toc (None: a part that opens with a lab)."""

    chapter: Page | None
    labs: list[Page] = field(default_factory=list)


def parts(pages: list[Page] | None = None) -> list[tuple[str, list[Row]]]:
    """The toc's parts in order (the root page is in none), each as rows: a chapter and the labs
    listed after it."""
    out: list[tuple[str, list[Row]]] = []
    for page in (pages or toc())[1:]:
        if not out or out[-1][0] != page.part:
            out.append((page.part, []))
        rows = out[-1][1]
        if not page.is_lab:
            rows.append(Row(page))
        elif rows:
            rows[-1].labs.append(page)
        else:
            rows.append(Row(None, [page]))
    return out


def lines(text: str) -> list[str]:
    """The text of a box, wrapped at spaces only (never inside "data-parallel")."""
    return textwrap.wrap(text, WRAP, break_on_hyphens=False)


def box(ax, x: float, y: float, h: float, text: str, colour: str) -> None:
    """A rounded box one column wide, top-left corner at (x, y), its text centred."""
    ax.add_patch(FancyBboxPatch((x, y), COLUMN, h, boxstyle="round,pad=0,rounding_size=4",
                                facecolor=colour + "22", edgecolor=colour, linewidth=1))
    ax.text(x + COLUMN / 2, y + h / 2, "\n".join(lines(text)), ha="center", va="center",
            fontsize=FONT, linespacing=1.15)


def arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8,
                                 color="#444444", linewidth=0.9, shrinkA=0, shrinkB=0))


def layout(pages: list[Page] | None) -> tuple[list[tuple[str, float, float, object]], float]:
    """(kind, top, height, what) of every band from top to bottom, and the total height."""
    items = [("legend", 4.0, HEADER, None)]
    y = 4.0 + HEADER + 4
    for caption, rows in parts(pages):
        items.append(("part", y, HEADER, caption))
        y += HEADER
        for row in rows:
            heights = [LINE * len(lines(lab.title)) + 2 * PAD for lab in row.labs]
            own = LINE * len(lines(row.chapter.title)) + 2 * PAD if row.chapter else 0
            # a chapter box spans its labs' boxes, and is at least as tall as its own text
            h = max(sum(heights) + SPACE * (len(heights) - 1), own)
            items.append(("row", y, h, (caption, row, heights)))
            y += h + SPACE
        y += 4
    return items, y


def draw(pages: list[Page] | None = None) -> plt.Figure:
    """The map: a caption per part, its chapters on the left, each one's labs on the right."""
    use_book_style()
    items, height = layout(pages)
    fig = plt.figure(figsize=(WIDTH / 100, height / 100), layout="none")
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(height, 0)
    ax.axis("off")
    chapter_x, lab_x = LEFT, LEFT + COLUMN + GAP
    for kind, top, h, what in items:
        if kind == "legend":
            for x, name, colour in ((chapter_x, "chapter", PALETTE[0]),
                                    (lab_x, "lab: run it, it checks itself", PALETTE[1])):
                ax.add_patch(FancyBboxPatch((x, top + 3), 14, 10, edgecolor=colour,
                                            boxstyle="round,pad=0,rounding_size=2",
                                            facecolor=colour + "22"))
                ax.text(x + 19, top + 8, name, va="center", fontsize=FONT)
        elif kind == "part":
            ax.text(chapter_x, top + HEADER / 2 + 1, what, va="center", fontsize=FONT + 0.5,
                    fontweight="bold")
        else:
            caption, row, heights = what
            if row.chapter:
                colour = PALETTE[2] if caption == REFERENCE else PALETTE[0]
                box(ax, chapter_x, top, h, row.chapter.title, colour)
            y = top
            for lab, lab_h in zip(row.labs, heights):
                box(ax, lab_x, y, lab_h, lab.title, PALETTE[1])
                if row.chapter:
                    arrow(ax, (chapter_x + COLUMN, y + lab_h / 2), (lab_x, y + lab_h / 2))
                y += lab_h + SPACE
    # the reading order runs from the first part to the last one before the Reference pages
    first = next(top for kind, top, _, _ in items if kind == "part")
    last = max(top + h for kind, top, h, what in items if kind == "row" and what[0] != REFERENCE)
    arrow(ax, (LEFT / 2, first), (LEFT / 2, last))
    ax.text(LEFT / 2 - 4, (first + last) / 2, "reading order", rotation=90, ha="center",
            va="center", fontsize=FONT, color="#444444",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    return fig


def svg(pages: list[Page] | None = None) -> bytes:
    """The figure as SVG: no date, fixed ids, text kept as text; equal inputs give equal bytes."""
    fig = draw(pages)
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "dplab", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def main() -> None:
    OUT.write_bytes(svg())


if __name__ == "__main__":
    main()
