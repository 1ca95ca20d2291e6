"""Draw what runs where when dplab.start_cluster() starts the labs' engines: on one machine
(launcher "mpiexec", cluster_start.svg, which the collectives chapter shows before Lab 0) and
on two SLURM nodes (launcher "slurm", cluster_slurm.svg, in the launching chapter).

The diagram is drawn by hand, but what it names is read from the code that does it: the
launchers' names (dplab.cluster.settings.LAUNCHERS), the default engine and node counts, how
the ranks are spread over the nodes (dplab.cluster.slurm.ranks_per_node), the batch script the
SLURM launcher submits (its BATCH_TEMPLATE), and the commands ipyparallel starts the
controller and the engines with.

Run from the repository root: .venv/bin/python img/launching/make_figures.py
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from ipyparallel.cluster.launcher import ipcontroller_cmd_argv, ipengine_cmd_argv
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from dplab.cluster.settings import DEFAULT_ENGINES, DEFAULT_NODES, LAUNCHERS
from dplab.cluster.slurm import BATCH_TEMPLATE, ranks_per_node
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style

HERE = Path(__file__).resolve().parent
FONT = 8
P = DEFAULT_ENGINES
NODES = DEFAULT_NODES
LOCAL, SLURM = LAUNCHERS[0], LAUNCHERS[1]
assert (LOCAL, SLURM) == ("mpiexec", "slurm"), LAUNCHERS  # the two panels' launchers

# The commands, as the machines run them ("python": the venv's interpreter).
CONTROLLER = " ".join(["python", *ipcontroller_cmd_argv[1:]])
ENGINE = " ".join(["python", *ipengine_cmd_argv[1:], "--mpi"])
SBATCH = {k: v for k, v in re.findall(r"#SBATCH --([\w-]+)=(\S+)", BATCH_TEMPLATE)}
EXEC = re.search(r"^exec (.*)$", BATCH_TEMPLATE, re.M).group(1)
KERNEL_C, CONTROL_C, MPI_C, RANK_C = "#e8eef7", "#fde9d4", "#e6e6e6", "#dcefdc"


def box(ax, x, y, w, h, text, color, weight="normal", edge="0.35", ls="-", size=FONT):
    """A rounded box with its lower left corner at (x, y), the text centred in it."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.8",
                                fc=color, ec=edge, lw=0.9, ls=ls))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size,
                weight=weight, linespacing=1.25)


def frame(ax, x, y, w, h, label):
    """A dashed frame around a group of boxes, its label at the top left."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=1.2",
                                fc="none", ec="0.45", lw=0.9, ls="--"))
    ax.text(x + 1, y + h - 0.6, label, ha="left", va="top", fontsize=FONT, style="italic",
            color="0.25")


def arrow(ax, start, end, text="", color="0.25", ls="-", where=0.5, dx=0.0, dy=1.0,
          ha="center", rad=0.0, both=False):
    """An arrow from start to end, with text beside the point `where` of the way along."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else "-|>",
                                 mutation_scale=8, color=color, lw=0.9, ls=ls,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=1, shrinkB=1))
    if text:
        x = start[0] + where * (end[0] - start[0]) + dx
        y = start[1] + where * (end[1] - start[1]) + dy
        ax.text(x, y, text, ha=ha, va="center", fontsize=FONT, color=color)


def rank_box(ax, x, y, w, h, rank, local_rank):
    """One engine, an MPI rank, with the local rank setup gives it; rank 0 hosts the store."""
    lines = [f"rank {rank}", f"LOCAL_RANK {local_rank}"]
    if rank == 0:
        lines.append("TCPStore host")
    box(ax, x, y, w, h, "\n".join(lines), RANK_C)


def placement(p: int, nodes: int) -> list[list[tuple[int, int]]]:
    """(rank, local rank) on each node: consecutive ranks, as ranks_per_node spreads them."""
    out, first = [], 0
    for count in ranks_per_node(p, nodes):
        out.append([(first + i, i) for i in range(count)])
        first += count
    return out


def one_machine(ax) -> None:
    ax.set_title(f'launcher="{LOCAL}": every process on this machine, every socket on loopback',
                 fontsize=FONT + 1, loc="left")
    box(ax, 0, 13, 21, 12, "notebook kernel\ndplab.start_cluster()\n(the client)", KERNEL_C,
        weight="bold")
    box(ax, 25, 24, 31, 9, "ipyparallel controller\n" + CONTROLLER, CONTROL_C)
    box(ax, 25, 3, 31, 12, f"mpiexec -n {P} " + ENGINE.replace(" -m", "\n-m", 1)
        + "\n(Hydra, and its proxy)", MPI_C)
    arrow(ax, (21, 23), (25, 28.5), "starts", dy=1.5, dx=-2.5)
    arrow(ax, (21, 15), (25, 9), "starts", dy=-1.5, dx=-2.5)
    frame(ax, 62, 0, 38, 36, "engines = MPI ranks = torch ranks")
    (ranks,) = placement(P, 1)
    w, h = 16, 10
    spots = [(64, 20), (82, 20), (64, 3), (82, 3)]
    for (rank, local), (x, y) in zip(ranks, spots):
        rank_box(ax, x, y, w, h, rank, local)
    arrow(ax, (56, 9), (64, 8), "")
    arrow(ax, (56, 11), (64, 23), "", where=0.4)
    ax.text(59, 18.5, "starts", fontsize=FONT, color="0.25", ha="center")
    arrow(ax, (64, 29), (56, 29), "register", ls="--", dy=-1.8, dx=-0.5)
    # the rendezvous: the others meet at rank 0's store
    arrow(ax, (82, 25), (80, 25), "")
    arrow(ax, (72, 13), (72, 20), "")
    arrow(ax, (82, 13), (78, 20), "")
    ax.text(81, 16.5, "store\nclients", fontsize=FONT, color="0.25", ha="left", va="center")


def two_nodes(ax) -> None:
    ax.set_title(f'launcher="{SLURM}": the engines in a SLURM job of {NODES} nodes',
                 fontsize=FONT + 1, loc="left")
    frame(ax, 0, -4, 22, 40, "this machine")
    arrow(ax, (11, 20), (11, 15), "starts", dx=1, dy=0, ha="left")
    box(ax, 1.5, 20, 19, 10, "notebook kernel\ndplab.start_cluster()", KERNEL_C,
        weight="bold")
    box(ax, 1.5, 5, 19, 10, "ipyparallel\ncontroller", CONTROL_C)
    job = {k: SBATCH[k].format(nodes=NODES, n=P) for k in ("nodes", "ntasks")}
    frame(ax, 27, -4, 73, 40, f"SLURM job: --nodes={job['nodes']} --ntasks={job['ntasks']}")
    arrow(ax, (20.5, 28), (27, 30), "sbatch", dy=1.6, dx=-1)
    half = 73 / NODES
    for i, ranks in enumerate(placement(P, NODES)):
        x0 = 28 + i * half
        frame(ax, x0, -3, half - 2, 35, f"node {i + 1}")
        if i == 0:
            cmd = EXEC.format(mpiexec="mpiexec", n=P, program_and_args="…")
            box(ax, x0 + 1.5, 19, half - 5, 9.5,
                f"the batch script:\n{cmd}\nand Hydra's proxy (srun)", MPI_C)
        else:
            box(ax, x0 + 1.5, 19, half - 5, 9.5, "Hydra's proxy,\nstarted by srun", MPI_C)
        w = (half - 6.5) / len(ranks)
        for j, (rank, local) in enumerate(ranks):
            x = x0 + 1.5 + j * (w + 1.5)
            rank_box(ax, x, 3, w, 12, rank, local)
            arrow(ax, (x + w / 2, 19), (x + w / 2, 15))
    arrow(ax, (28 + half - 3.5, 23.5), (28 + half + 1.5, 23.5), "srun", dy=1.6)
    arrow(ax, (29.5, 9.5), (20.5, 9.5), "register\n(iface)", ls="--", dy=2.6, dx=0.5)
    rank0 = 28 + 1.5 + (half - 6.5) / 4
    rank2 = rank0 + half
    arrow(ax, (rank2, 3), (rank0, 3), "to rank 0's store (iface)", rad=-0.1, where=0.5,
          dy=-3.6)


def panel(draw, bottom: float) -> plt.Figure:
    """One of the two drawings, on axes 100 units wide, from `bottom` up to 37."""
    fig, ax = plt.subplots(figsize=(6.8, 5.8 * (37 - bottom) / 78))
    ax.set_xlim(0, 100)
    ax.set_ylim(bottom, 37)
    ax.axis("off")
    draw(ax)
    return fig


def figures() -> dict[str, bytes]:
    """File name -> SVG bytes: one machine (collectives chapter), a SLURM job (launching)."""
    use_book_style()
    return {"cluster_start.svg": svg_bytes(panel(one_machine, 0)),
            "cluster_slurm.svg": svg_bytes(panel(two_nodes, -4))}


def main() -> None:
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
