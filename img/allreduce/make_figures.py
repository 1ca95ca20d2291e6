"""Draw the all-reduce chapter's figures (img/allreduce/*.svg) from Lab 3's own code.

- alpha_beta.svg: the time of one message against its size, from the lab's cost model.
- tree.svg: who sends to whom in each round of Lab 3's binomial-tree all-reduce (P_TREE ranks).
- ring_steps.svg: who sends which chunk to whom in each step of Lab 3's ring all-reduce (P
  ranks), and which chunks each rank then holds fully reduced.
- recursive_doubling.svg, rabenseifner.svg: the same for Lab 3's recursive doubling and the
  chapter's Rabenseifner all-reduce (labcode.formulas), one panel per round.
- costs.svg: naive, tree, ring and Rabenseifner against n, from the lab's cost model, with the
  chapter's ring-tree crossover (labcode.formulas).
- hierarchical.svg: the chapter's three steps of a hierarchical all-reduce on HIER_NODES nodes
  of HIER_LOCAL ranks, played on sets of ranks, and which chunks each rank then holds.
- pipeline.svg: n bytes down a chain of PIPE_P ranks, whole or in PIPE_K slices, each message
  a box of α then its bytes; it ends when the chapter's pipelined_chain_time says.

The tree, ring, recursive doubling and Rabenseifner schedules are not drawn from a description:
the script runs the all-reduces on threads (`dplab.localcomm.run_ranks`) through a communicator
that records every message, so the pictures are the real schedules.

Run from the repository root: .venv/bin/python img/allreduce/make_figures.py
(tests/test_figures.py fails while a stored figure differs from what this script draws).
"""
from dataclasses import dataclass
from pathlib import Path as FilePath

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.path import Path
from matplotlib.patches import FancyArrowPatch, Rectangle

import dplab.hardware as hw
import labcode.costmodel as cm
import labcode.formulas as lf
from dplab.localcomm import run_ranks
from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from labcode.allreduce import (allreduce_recursive_doubling, allreduce_ring,
                                allreduce_tree)
from labcode.formulas import allreduce_rabenseifner

P = 4        # ranks in the ring, recursive doubling and Rabenseifner figures (the
             # chapter reads this line)
P_TREE = 8   # ranks in the tree figure (the chapter reads this line)
P_COST = 64  # ranks in the cost curves: the chapter's InfiniBand job (it checks this line)
HIER_NODES = 2  # nodes in the hierarchical figure (the chapter reads this line)
HIER_LOCAL = 2  # ranks per node in the hierarchical figure (the chapter reads this line)
PIPE_P = 4   # ranks in the pipeline figure's chain (the chapter reads this line)
PIPE_K = 3   # slices in the pipeline figure (the chapter reads this line)
PIPE_ALPHA = 0.12  # α in the pipeline figure, in units of nβ: visible, not measured
FONT = 8     # points: the smallest text the book allows


@dataclass(frozen=True)
class Message:
    """One message of a recorded schedule: its round, sender, receiver and the elements of
    the sender's vector it carries."""

    round: int
    src: int
    dst: int
    start: int
    size: int


class Recorder:
    """Forwards to a LocalComm; records the messages this rank sends and x at every Sendrecv.

    Rounds are counted with a logical clock: a rank sends at most one message per round, and
    a message sent in round k can be used from round k + 1. Each message is followed by its
    round, so the receiver learns when it left.
    """

    def __init__(self, comm, x: np.ndarray):
        self.comm, self.x = comm, x
        self.round = 0                 # the round of this rank's next send
        self.sent: list[Message] = []
        self.states: list[np.ndarray] = []  # x at the start of every Sendrecv

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    def _send(self, buf: np.ndarray, dest: int) -> None:
        offset = buf.__array_interface__["data"][0] - self.x.__array_interface__["data"][0]
        self.sent.append(Message(self.round, self.Get_rank(), dest,
                                 offset // self.x.itemsize, buf.size))
        self.comm.Send(buf, dest=dest)
        self.comm.Send(np.array([self.round]), dest=dest)

    def _recv(self, buf: np.ndarray, source: int) -> int:
        self.comm.Recv(buf, source=source)
        sent_in = np.empty(1, dtype=int)
        self.comm.Recv(sent_in, source=source)
        return int(sent_in[0])

    def Send(self, buf, dest: int) -> None:
        self._send(buf, dest)
        self.round += 1

    def Recv(self, buf, source: int) -> None:
        self.round = max(self.round, self._recv(buf, source) + 1)

    def Sendrecv(self, sendbuf, dest: int, recvbuf, source: int) -> None:
        self.states.append(self.x.copy())
        self._send(sendbuf, dest)
        self.round = max(self.round + 1, self._recv(recvbuf, source) + 1)


NAMES = {allreduce_tree: "tree", allreduce_ring: "ring",
         allreduce_recursive_doubling: "recursive_doubling",
         allreduce_rabenseifner: "rabenseifner"}  # each one's name in labcode.costmodel


def record(allreduce, p: int) -> tuple[list[Message], list[list[np.ndarray]]]:
    """Run Lab 3's all-reduce on p threads with x = ones(p) on every rank.

    Returns every message sent, by round, and for each rank its x after every Sendrecv: one
    element per chunk, so an element counts the ranks whose values its chunk holds.
    """
    def rank(comm):
        x = np.ones(p, dtype=int)
        rec = Recorder(comm, x)
        out = allreduce(rec, x)
        assert np.array_equal(out, np.full(p, p))  # the all-reduce is right
        return rec.sent, rec.states[1:] + [x.copy()]

    per_rank = run_ranks(p, rank)
    messages = sorted((m for sent, _ in per_rank for m in sent),
                      key=lambda m: (m.round, m.src))
    # The recorded rounds are the lab's cost model's: as many rounds, as many senders in
    # each, and messages of its size (n = p elements).
    rounds = cm.schedule(NAMES[allreduce], float(p), p)
    assert [sum(m.round == k for m in messages) for k in range(len(rounds))] \
        == [s.senders for s in rounds] and messages[-1].round == len(rounds) - 1
    assert all(m.size == rounds[m.round].nbytes for m in messages)
    return messages, [states for _, states in per_rank]


def alpha_beta_figure():
    """One message of n bytes over InfiniBand: the α-β time and its two terms."""
    alpha, beta = hw.ALPHA, hw.infiniband_beta()
    n = np.logspace(0, 9, 200)
    t = np.array([cm.Cost(1, b, 0).time(alpha, beta) for b in n])
    fig, ax = plt.subplots(figsize=(4.5, 3.0))
    ax.loglog(n, t * 1e6, color=PALETTE[0], lw=2, label="t = α + nβ")
    ax.loglog(n, np.full_like(n, alpha * 1e6), "--", color=PALETTE[1], lw=1,
              label=f"α = {alpha * 1e6:g} µs (assumed)")
    ax.loglog(n, n * beta * 1e6, ":", color=PALETTE[2], lw=1.5,
              label=f"nβ, 1/β = {1e-9 / beta:g} GB/s")
    half = alpha / beta
    ax.axvline(half, color="0.5", lw=0.8)
    ax.text(half * 1.3, 3e3, f"n = α/β\n= {half / 1e3:g} kB", fontsize=FONT, va="top")
    ax.set(xlabel="message size n (bytes)", ylabel="time of one message (µs)",
           ylim=(1, 1e5), title="one message over NDR InfiniBand")
    ax.legend(fontsize=FONT, loc="upper left")
    return fig


def arc(ax, src: float, dst: float, y: float, height: float, color: str, label: str) -> None:
    """An arrow from (src, y) to (dst, y) that bulges by height (up if > 0), labelled at its
    apex."""
    path = Path([(src, y), ((src + dst) / 2, y + 2 * height), (dst, y)],
                [Path.MOVETO, Path.CURVE3, Path.CURVE3])
    ax.add_patch(FancyArrowPatch(path=path, arrowstyle="-|>", mutation_scale=9, lw=1.2,
                                 color=color))
    ax.text((src + dst) / 2, y + height, label, ha="center", va="center", fontsize=FONT,
            color=color, bbox=dict(boxstyle="circle,pad=0.15", fc="white", ec=color, lw=0.8))


def tree_figure():
    """Lab 3's allreduce_tree at P_TREE ranks: reduce arrows above, broadcast below."""
    messages, _ = record(allreduce_tree, P_TREE)
    L = cm.log2_ceil(P_TREE)
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    box_h = 0.5
    for r in range(P_TREE):
        ax.add_patch(Rectangle((r - 0.3, -box_h / 2), 0.6, box_h, fc="0.93", ec="0.3",
                               lw=0.8))
        ax.text(r, 0, f"rank {r}", ha="center", va="center", fontsize=FONT)
    for m in messages:
        k = m.round + 1                     # rounds 1 to L reduce, L + 1 to 2L broadcast
        height = 0.36 * abs(m.src - m.dst)
        if k <= L:   # above: leave from the left half, arrive on the right, outer to the left
            arc(ax, m.src - 0.16, m.dst + 0.24 - 0.1 * k, box_h / 2, height, PALETTE[0],
                str(k))
        else:        # below: the same, mirrored
            arc(ax, m.src - 0.16 + 0.1 * (k - L), m.dst - 0.16, -box_h / 2, -height,
                PALETTE[1], str(k))
    top = 0.36 * (P_TREE // 2) + box_h / 2 + 0.1
    right = P_TREE - 0.5
    ax.text(right, top, f"reduce: rounds 1 to {L}", fontsize=FONT + 1, ha="right",
            color=PALETTE[0], va="top")
    ax.text(right, -top, f"broadcast: rounds {L + 1} to {2 * L}", fontsize=FONT + 1,
            ha="right", color=PALETTE[1], va="bottom")
    ax.set_xlim(-0.5, right)
    ax.set_ylim(-top - 0.1, top + 0.1)
    ax.axis("off")
    return fig


def rank_box(ax, x: float, y: float, r: int, counts, p: int) -> None:
    """Rank r at (x, y) with its chunks: shaded by how many of the p ranks' values each
    holds, solid and bold once it holds all p."""
    w = 0.22
    ax.text(x, y + w / 2 + 0.04, f"rank {r}", ha="center", va="bottom", fontsize=FONT)
    cmap = plt.get_cmap("Blues")
    for c, k in enumerate(counts):
        full = k == p
        cx = x + (c - len(counts) / 2) * w
        ax.add_patch(Rectangle((cx, y - w / 2), w, w, lw=0.6, ec="0.3",
                               fc=PALETTE[0] if full else cmap(0.08 + 0.45 * k / p)))
        ax.text(cx + w / 2, y, str(c), ha="center", va="center", fontsize=FONT,
                color="white" if full else "black", weight="bold" if full else "normal")


def ring_figure():
    """Lab 3's allreduce_ring at P ranks, one panel per step, ranks on a ring."""
    messages, states = record(allreduce_ring, P)
    assert P == 4, "the layout puts the ranks on the corners of a square"
    where = {0: (-0.85, 0.55), 1: (0.85, 0.55), 2: (0.85, -0.55), 3: (-0.85, -0.55)}
    steps = 2 * (P - 1)
    fig, axes = plt.subplots(2, P - 1, figsize=(7.0, 3.7))
    for k, ax in enumerate(axes.flat):
        phase = "reduce-scatter" if k < P - 1 else "all-gather"
        ax.set_title(f"{phase}, step {k % (P - 1) + 1}", fontsize=FONT + 1)
        for r, (x, y) in where.items():
            rank_box(ax, x, y, r, states[r][k], P)
        for m in (m for m in messages if m.round == k):
            assert m.size == 1  # one element per chunk: the element's index is the chunk's
            (x0, y0), (x1, y1) = where[m.src], where[m.dst]
            if y0 == y1:  # along the top or the bottom
                dx = np.sign(x1 - x0) * 0.48
                a, b = (x0 + dx, y0), (x1 - dx, y1)
                label_at, va = ((x0 + x1) / 2, y0 + (0.1 if y0 > 0 else -0.1)), \
                    "bottom" if y0 > 0 else "top"
            else:         # down the right side or up the left side
                dy = np.sign(y1 - y0) * 0.2
                a, b = (x0, y0 + dy), (x1, y1 - dy)
                label_at, va = (x0 + (-0.12 if x0 > 0 else 0.12), 0), "center"
            ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, lw=1.2,
                                         color=PALETTE[1], shrinkA=0, shrinkB=0))
            ax.text(*label_at, f"chunk {m.start}", fontsize=FONT, color=PALETTE[1],
                    ha="right" if x0 > 0 and y0 != y1 else
                    ("left" if y0 != y1 else "center"), va=va)
        ax.set_xlim(-1.4, 1.4)
        ax.set_ylim(-0.95, 0.95)
        ax.set_aspect("equal")
        ax.axis("off")
    assert k == steps - 1
    return fig


def chunks_label(m: Message) -> str:
    """The chunks a message of a P-element run carries: "1" or "2–3"."""
    last = m.start + m.size - 1
    return str(m.start) if m.size == 1 else f"{m.start}–{last}"


def exchange_figure(allreduce, titles: list[str], shape: tuple[int, int],
                    size: tuple[float, float]):
    """An all-reduce whose rounds swap data between r and r XOR 2^j, at P ranks, one
    panel per round: partners XOR 1 side by side, partners XOR 2 one above the other."""
    messages, states = record(allreduce, P)
    assert P == 4, "the layout puts the ranks on the corners of a square"
    where = {0: (-0.85, 0.55), 1: (0.85, 0.55), 2: (-0.85, -0.55), 3: (0.85, -0.55)}
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False)
    assert len(titles) == axes.size == messages[-1].round + 1
    for k, (ax, title) in enumerate(zip(axes.flat, titles)):
        ax.set_title(title, fontsize=FONT + 1)
        for r, (x, y) in where.items():
            rank_box(ax, x, y, r, states[r][k], P)
        for m in (m for m in messages if m.round == k):
            (x0, y0), (x1, y1) = where[m.src], where[m.dst]
            assert m.dst == m.src ^ (1 if y0 == y1 else 2)  # the layout's partners
            if y0 == y1:  # side by side: rightwards above, leftwards below
                s = np.sign(x1 - x0)
                a, b = (x0 + s * 0.48, y0 + s * 0.05), (x1 - s * 0.48, y1 + s * 0.05)
                at, ha, va = (0, y0 + s * 0.1), "center", "bottom" if s > 0 else "top"
            else:         # one above the other: downwards on the left, upwards right
                s = np.sign(y1 - y0)
                dx = 0.07 * s
                a, b = (x0 + dx, y0 - 0.16 if s < 0 else y0 + 0.3), \
                    (x1 + dx, y1 + 0.3 if s < 0 else y1 - 0.16)
                at, ha, va = (x0 + 2 * dx, 0.07), "left" if s > 0 else "right", "center"
            ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, lw=1.2,
                                         color=PALETTE[1], shrinkA=0, shrinkB=0))
            ax.text(*at, chunks_label(m), fontsize=FONT, color=PALETTE[1], ha=ha, va=va)
        ax.set_xlim(-1.4, 1.4)
        ax.set_ylim(-0.8, 0.95)
        ax.set_aspect("equal")
        ax.axis("off")
    return fig


def recursive_doubling_figure():
    """Lab 3's allreduce_recursive_doubling at P ranks, one panel per round."""
    rounds = cm.log2_ceil(P)
    return exchange_figure(allreduce_recursive_doubling,
                           [f"round {k + 1}: r XOR {2 ** k}" for k in range(rounds)],
                           (1, rounds), (5.0, 2.1))


def rabenseifner_figure():
    """The chapter's allreduce_rabenseifner at P ranks, one panel per round."""
    L = cm.log2_ceil(P)
    titles = [f"reduce-scatter, round {k + 1}: r XOR {P >> (k + 1)}" for k in range(L)] \
        + [f"all-gather, round {L + k + 1}: r XOR {2 ** k}" for k in range(L)]
    return exchange_figure(allreduce_rabenseifner, titles, (2, L), (5.0, 3.9))


def costs_figure():
    """All-reduce time against n at P_COST ranks over InfiniBand, from the cost model."""
    alpha, beta = hw.ALPHA, hw.infiniband_beta()
    n = np.logspace(2, 10, 200)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    styles = {"naive": "-", "tree": "-", "ring": "-", "rabenseifner": "--"}
    for i, (alg, style) in enumerate(styles.items()):
        t = [cm.allreduce_time(alg, b, P_COST, alpha, beta) for b in n]
        ax.loglog(n, t, style, color=PALETTE[i], lw=1.5, label=alg)
    cross = lf.ring_tree_crossover_bytes(P_COST, alpha, beta)
    ax.axvline(cross, color="0.5", lw=0.8)
    ax.text(cross / 1.4, 2.0, f"ring = tree\nat {cross / 1e6:.1f} MB", ha="right",
            va="top", fontsize=FONT)
    ax.set(xlabel="gradient size n (bytes)", ylabel="all-reduce time (s)",
           title=f"p = {P_COST}, NDR InfiniBand, α = {alpha * 1e6:g} µs")
    ax.legend(fontsize=FONT, loc="lower right")
    return fig


Message3 = tuple[int, int, int]  # sender, receiver, chunk


def hierarchical_steps(nodes: int, local: int) -> list[tuple[str, list[Message3], bool]]:
    """The chapter's hierarchical all-reduce on two nodes of two ranks, numbered node after
    node: per step its title, its messages (sender, receiver, chunk) and whether receivers
    add (else copy). Local rank l reduces chunk l."""
    assert nodes == local == 2, "each step is one swap between two partners"
    p = nodes * local
    inside = [(r, r ^ 1, (r ^ 1) % local) for r in range(p)]   # send the partner's chunk
    across = [(r, (r + local) % p, r % local) for r in range(p)]  # chunk l, to the other node
    gather = [(r, r ^ 1, r % local) for r in range(p)]            # own chunk, to the partner
    return [("1. reduce-scatter in node", inside, True),
            ("2. all-reduce across nodes", across, True),
            ("3. all-gather in node", gather, False)]


def hierarchical_figure():
    """The chapter's three steps on HIER_NODES nodes of HIER_LOCAL ranks, one panel each:
    in-node messages inside the node boxes, the slow cross-node ones between them."""
    nodes, local = HIER_NODES, HIER_LOCAL
    p = nodes * local
    held = [[{r} for _ in range(local)] for r in range(p)]  # ranks whose values chunk c holds
    steps = hierarchical_steps(nodes, local)
    crossing = [m for _, messages, _ in steps for m in messages if m[0] // local != m[1] // local]
    for k in range(nodes):  # each node sends the chapter's bytes out (n = 1, chunks of 1/L)
        out = sum(1 / local for src, _, _ in crossing if src // local == k)
        assert np.isclose(out, lf.node_bytes_hierarchical(1.0, nodes))
    fig, axes = plt.subplots(1, len(steps), figsize=(6.0, 2.1))
    where = {r: ((-0.62, 0.62)[r % local], (0.55, -0.55)[r // local]) for r in range(p)}
    for ax, (title, messages, adds) in zip(axes, steps):
        sent = {(src, dst): [set(s) for s in held[src]] for src, dst, _ in messages}
        for src, dst, c in messages:  # every message leaves before any arrives
            payload = sent[src, dst][c]
            if adds:
                assert not payload & held[dst][c]  # no rank's value counted twice
                held[dst][c] = held[dst][c] | payload
            else:
                held[dst][c] = set(payload)
        ax.set_title(title, fontsize=FONT + 1)
        for k in range(nodes):
            y = (0.55, -0.55)[k]
            ax.add_patch(Rectangle((-1.3, y - 0.34), 2.6, 0.7, fc="0.96", ec="0.6", lw=0.8,
                                   ls="--"))
            ax.text(-1.25, y - 0.31, f"node {k}", fontsize=FONT, color="0.4", va="bottom")
        for r, (x, y) in where.items():
            rank_box(ax, x, y, r, [len(s) for s in held[r]], p)
        for src, dst, c in messages:
            (x0, y0), (x1, y1) = where[src], where[dst]
            if y0 == y1:  # inside a node: rightwards above, leftwards below
                s = np.sign(x1 - x0)
                a, b = (x0 + s * 0.26, y0 + s * 0.05), (x1 - s * 0.26, y1 + s * 0.05)
                color, at = PALETTE[1], (0, y0 + s * 0.08)
                ha, va = "center", "bottom" if s > 0 else "top"
            else:         # across: downwards on the left of the rank, upwards on its right
                s = np.sign(y1 - y0)
                dx = 0.08 * s
                a, b = (x0 + dx, y0 - 0.14 if s < 0 else y0 + 0.3), \
                    (x1 + dx, y1 + 0.3 if s < 0 else y1 - 0.14)
                color, at = PALETTE[3], (x0 + 2 * dx, 0.08)
                ha, va = "left" if s > 0 else "right", "center"
            ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, lw=1.2,
                                         color=color, shrinkA=0, shrinkB=0))
            ax.text(*at, str(c), fontsize=FONT, color=color, ha=ha, va=va)
        ax.set_xlim(-1.35, 1.35)
        ax.set_ylim(-0.92, 0.92)
        ax.set_aspect("equal")
        ax.axis("off")
    assert all(s == set(range(p)) for chunks in held for s in chunks)  # an all-reduce
    return fig


def pipeline_figure():
    """n bytes down a chain of PIPE_P ranks: whole (above) and in PIPE_K slices (below), one
    row per link; each message a box of α (grey) then its bytes, n β = 1."""
    p, alpha = PIPE_P, PIPE_ALPHA
    fig, axes = plt.subplots(2, 1, figsize=(5.0, 2.8), sharex=True)
    for ax, k in zip(axes, (1, PIPE_K)):
        step = alpha + 1 / k
        for link in range(p - 1):
            for j in range(k):  # slice j crosses link i in step i + j
                t = (link + j) * step
                ax.add_patch(Rectangle((t, link - 0.35), alpha, 0.7, fc="0.8", ec="none"))
                ax.add_patch(Rectangle((t + alpha, link - 0.35), 1 / k, 0.7, fc=PALETTE[j],
                                       ec="white", lw=0.8))
                if k > 1:
                    ax.text(t + alpha + 0.5 / k, link, str(j + 1), ha="center",
                            va="center", fontsize=FONT, color="white")
        end = (p - 2 + k) * step
        assert np.isclose(end, lf.pipelined_chain_time(1.0, p, k, alpha, 1.0))
        ax.axvline(end, color="0.3", lw=0.8)
        ax.text(end + 0.05, p - 2, f"{p - 2 + k} steps of α + nβ/{k}" if k > 1 else
                f"{p - 1} steps of α + nβ", fontsize=FONT, va="center")
        ax.set_yticks(range(p - 1), [f"{i} → {i + 1}" for i in range(p - 1)],
                      fontsize=FONT)
        ax.set_ylim(p - 1.6, -0.6)
        ax.set_ylabel("link", fontsize=FONT)
        ax.set_title("sent whole" if k == 1 else f"cut into k = {k} slices",
                     fontsize=FONT + 1)
        ax.grid(False)
    axes[1].set_xlim(0, (p - 1) * (alpha + 1) + 1.0)
    axes[1].set_xlabel("time, in units of nβ")
    return fig


def figures() -> dict[str, bytes]:
    """Every figure of the chapter: file name -> SVG bytes."""
    use_book_style()
    return {"alpha_beta.svg": svg_bytes(alpha_beta_figure()),
            "tree.svg": svg_bytes(tree_figure()),
            "ring_steps.svg": svg_bytes(ring_figure()),
            "recursive_doubling.svg": svg_bytes(recursive_doubling_figure()),
            "rabenseifner.svg": svg_bytes(rabenseifner_figure()),
            "costs.svg": svg_bytes(costs_figure()),
            "hierarchical.svg": svg_bytes(hierarchical_figure()),
            "pipeline.svg": svg_bytes(pipeline_figure())}


def main() -> None:
    write_figures(figures(), FilePath(__file__).resolve().parent)


if __name__ == "__main__":
    main()
