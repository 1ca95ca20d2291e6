"""Draw the DDP chapters' figures: img/ddp/ddp_run.svg and sampler.svg ("Using DDP"), and
img/ddp/buckets.svg, overlap_timeline.svg, no_sync.svg and profiled_step.svg ("Inside DDP").

buckets.svg cuts Lab 4's wide MLP into buckets with Lab 4's own reverse_buckets (a figure
script may use a later lab's code; the chapter checks the same rule against DDP itself).
ddp_run.svg reads chapters/ddp_train.py, the script that "Using DDP" lists, for the line of
each call it shows; overlap_timeline.svg and no_sync.svg take every start and end from the
step-time formula of "Inside DDP", labcode.formulas.overlap_step_time; sampler.svg shows the
indices that torch's own DistributedSampler returns. profiled_step.svg draws one step of a real
run as the PyTorch profiler recorded it, kept in profiled_step.json: rebuild that file from
the traces of tests/mpi/profile_runs.py with `--traces FOLDER RUN`.

Run from the repository root: .venv/bin/python img/ddp/make_figures.py
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

from dplab.plots import PALETTE, svg_bytes, write_figures, use_book_style
from torch.utils.data import DistributedSampler

from dplab.models import mlp
from labcode.formulas import overlap_step_time
from labcode.overlap import WIDE_MLP, reverse_buckets

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "chapters" / "ddp_train.py"
FONT = 8

# ---------------------------------------------------------------------------------------
# ddp_run.svg: what every rank of chapters/ddp_train.py does, and where the ranks meet.
RUN_P = 3  # ranks drawn
LOCAL, TOGETHER, RANK0 = "local", "together", "rank 0"
# (a line of ddp_train.py, what the figure calls it, who does it, what the box says)
RUN = [
    (r'dist\.init_process_group\("gloo"\)', "init_process_group", TOGETHER,
     "rendezvous at MASTER_ADDR:MASTER_PORT, then connect"),
    (r"ddp = DDP\(", "DDP(model)", TOGETHER,
     "broadcast: rank 0's parameters and buffers to every rank"),
    (r"sampler\.set_epoch\(epoch\)", "sampler.set_epoch(epoch)", LOCAL,
     "the shuffle's items\n{r}, {r1}, {r2}, …"),
    (r"loss = F\.cross_entropy\(ddp\(x\), y\)", "forward: ddp(x)", LOCAL,
     "forward on its\nown B samples"),
    (r"loss\.backward\(\)  #", "loss.backward()", TOGETHER,
     "backward; all_reduce per bucket → the average gradient"),
    (r"opt\.step\(\)", "opt.step()", LOCAL, "the same update"),
    (r"save\(epoch, done, step, total\)", "save(…), every k", RANK0,
     "all_gather, then\nwrites the file"),
    (r"dist\.all_reduce\(total\)", "all_reduce(total)", TOGETHER,
     "all_reduce: the epoch's loss over all ranks' samples"),
    (r"save\(args\.epochs, ", "save(…)", RANK0, "all_gather, then\nwrites the file"),
    (r"dist\.all_reduce\(score\)", "all_reduce(score)", TOGETHER,
     "all_reduce: (correct, count) → the exact test accuracy"),
    (r"dist\.destroy_process_group\(\)", "destroy_process_group()", LOCAL,
     "closes its\nconnections"),
]
LOOPS = [("every step", 3, 6), ("every epoch", 2, 7)]  # rows of RUN each loop repeats


def script_lines(pattern: str) -> list[int]:
    """The numbers of the lines of ddp_train.py that match pattern."""
    lines = SCRIPT.read_text().splitlines()
    return [i + 1 for i, line in enumerate(lines) if re.search(pattern, line)]


def run_rows() -> list[tuple[int, str, str, str]]:
    """RUN with each call's line in ddp_train.py, checked to be one line and in this order."""
    rows = []
    for pattern, call, who, text in RUN:
        found = script_lines(pattern)
        assert len(found) == 1, f"{pattern!r} matches lines {found} of {SCRIPT.name}"
        rows.append((found[0], call, who, text))
    assert [r[0] for r in rows] == sorted(r[0] for r in rows), "calls out of order"
    return rows


def ddp_run() -> plt.Figure:
    rows = run_rows()
    fig = plt.figure(figsize=(7.0, 0.48 * len(rows) + 0.7), layout="none")
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 7.0)
    ax.set_ylim(len(rows) + 1.0, -0.2)
    ax.axis("off")
    col0, col_w = 2.72, 1.42  # inches: the first rank column, a rank column
    colour = {LOCAL: PALETTE[0], TOGETHER: PALETTE[1], RANK0: PALETTE[2]}
    for r in range(RUN_P):
        ax.text(col0 + (r + 0.5) * col_w, 0.15, f"rank {r}", ha="center", va="center",
                fontsize=FONT + 1, weight="bold")
    ax.text(0.05, 0.15, "chapters/ddp_train.py", ha="left", va="center", fontsize=FONT + 1,
            weight="bold")
    for i, (line, call, who, text) in enumerate(rows):
        y = i + 1
        ax.text(0.05, y, f"line {line}", ha="left", va="center", fontsize=FONT, color="0.35")
        ax.text(0.55, y, call, ha="left", va="center", fontsize=FONT, family="monospace")
        box = dict(boxstyle="round,pad=0,rounding_size=0.06", linewidth=0.8,
                   edgecolor=colour[who])
        if who == TOGETHER:
            ax.add_patch(FancyBboxPatch((col0 + 0.05, y - 0.34), RUN_P * col_w - 0.1, 0.68,
                                        facecolor=colour[who] + "33", **box))
            ax.text(col0 + RUN_P * col_w / 2, y, text, ha="center", va="center",
                    fontsize=FONT)
            continue
        if who == RANK0:  # the other ranks take part in save()'s all_gather only
            for r in range(1, RUN_P):
                ax.text(col0 + (r + 0.5) * col_w, y, "all_gather only", ha="center",
                        va="center", fontsize=FONT, color="0.35", style="italic")
        for r in range(RUN_P if who == LOCAL else 1):
            x = col0 + r * col_w
            ax.add_patch(FancyBboxPatch((x + 0.08, y - 0.3), col_w - 0.16, 0.6,
                                        facecolor=colour[who] + "22", **box))
            ax.text(x + col_w / 2, y, text.format(r=r, r1=r + RUN_P, r2=r + 2 * RUN_P),
                    ha="center", va="center", fontsize=FONT, linespacing=1.1)
    for k, (name, first, last) in enumerate(LOOPS):
        x = col0 - 0.06 - 0.2 * k
        ax.plot([x, x], [first + 1 - 0.38, last + 1 + 0.38], color="0.4", linewidth=0.8)
        ax.text(x - 0.04, (first + last) / 2 + 1, name, rotation=90, ha="right",
                va="center", fontsize=FONT, color="0.35")
    handles = [Rectangle((0, 0), 1, 1, facecolor=colour[w] + "33", edgecolor=colour[w])
               for w in (LOCAL, TOGETHER, RANK0)]
    ax.legend(handles, ["each rank on its own", "all ranks together (a collective)",
                        "rank 0 only"], loc="lower center", ncol=3, fontsize=FONT,
              frameon=False, bbox_to_anchor=(0.5, 0.0))
    return fig


# ---------------------------------------------------------------------------------------
# buckets.svg: how the wide MLP of "Inside DDP" (Lab 4's WIDE_MLP) falls into buckets, last
# parameter first, at each cap of BUCKET_CAPS (MiB), by Lab 4's reverse_buckets.
BUCKET_CAPS = (5, 25)


def bucket_tensors(cap_mib: float) -> list[list[tuple[str, float]]]:
    """Each bucket's tensors as (name, MiB), in the order DDP fills them: Wi and bi are
    layer i's weight and bias."""
    model = mlp(sizes=WIDE_MLP)
    names, layer = {}, 0
    for name, q in model.named_parameters():
        weight = name.endswith("weight")
        layer += weight
        names[id(q)] = f"{'W' if weight else 'b'}{layer}"
    buckets = reverse_buckets(model.parameters(), cap_mib * 2**20)
    assert sum(len(b) for b in buckets) == len(names)
    return [[(names[id(q)], q.numel() * q.element_size() / 2**20) for q in b] for b in buckets]


def buckets_figure() -> plt.Figure:
    fig, axes = plt.subplots(len(BUCKET_CAPS), 1, figsize=(7.0, 1.25 * len(BUCKET_CAPS) + 0.4),
                             sharex=True)
    for ax, cap in zip(axes, BUCKET_CAPS):
        buckets = bucket_tensors(cap)
        x = 0.0
        for k, bucket in enumerate(buckets):
            col, start = PALETTE[k % len(PALETTE)], x
            for name, mib in bucket:
                ax.broken_barh([(x, mib)], (0, 1), facecolors=col + "66", edgecolors=col,
                               linewidth=0.8)
                if mib >= 2:
                    ax.text(x + mib / 2, 0.5, name, ha="center", va="center", fontsize=FONT)
                x += mib
            size = x - start
            ax.text((start + x) / 2, 1.12, f"bucket {k + 1}: {size:.1f} MiB", ha="center",
                    va="bottom", fontsize=FONT)
            if size >= cap:  # closed by the tensor that took it to the cap
                ax.annotate("", xy=(start + cap, -0.22), xytext=(start, -0.22),
                            arrowprops=dict(arrowstyle="|-|", color="0.3", lw=0.8,
                                            mutation_scale=3, shrinkA=0, shrinkB=0))
                ax.text(start + cap / 2, -0.3, "cap", ha="center", va="top",
                        fontsize=FONT, color="0.3")
            else:        # the gradients ran out first
                ax.text((start + x) / 2, -0.3, "the rest, under the cap", ha="center",
                        va="top", fontsize=FONT, color="0.3")
        ax.set_title(f"bucket_cap_mb = {cap}: {len(buckets)} buckets", fontsize=FONT + 1,
                     loc="left", pad=14)
        ax.set_ylim(-0.75, 1.1)
        ax.set_yticks([])
        ax.set_xlim(0, x)
        ax.tick_params(axis="x", labelsize=FONT)
        ax.grid(visible=False)
        for side in ("left", "right", "top", "bottom"):
            ax.spines[side].set_visible(side == "bottom" and ax is axes[-1])
        if ax is not axes[-1]:
            ax.tick_params(axis="x", length=0)
    axes[-1].set_xlabel("MiB of gradients, in the order backward produces them: the output "
                        "layer's (W11, b11) first", fontsize=FONT)
    return fig


# ---------------------------------------------------------------------------------------
# overlap_timeline.svg: one backward pass of three buckets, without and with overlap.
# The two examples of "Inside DDP", section "Overlap: sync and async all_reduce": that
# chapter reads them from here (time units: compute c_i and all-reduce m_i per bucket).
EXAMPLES = {
    "compute-bound": ([10, 10, 10], [1, 1, 1]),
    "balanced": ([5, 5, 5], [5, 5, 5]),
    "communication-bound": ([1, 1, 1], [10, 10, 10]),
}


def schedule(compute, comm, overlap: bool) -> dict[str, np.ndarray | float]:
    """Each bucket's compute span and all-reduce span, from overlap_step_time alone.

    Bucket i's all-reduce waits only for buckets 1..i, so it ends at the step time of the
    first i buckets; without overlap, all gradients are one bucket, ready when backward ends.
    """
    compute, comm = np.asarray(compute, float), np.asarray(comm, float)
    ready = np.cumsum(compute)
    if overlap:
        end = np.array([overlap_step_time(compute[:i], comm[:i])
                        for i in range(1, len(comm) + 1)])
    else:
        end = overlap_step_time([compute.sum()], [comm.sum()]) - comm.sum() + np.cumsum(comm)
    step = overlap_step_time(compute, comm) if overlap else \
        overlap_step_time([compute.sum()], [comm.sum()])
    assert np.isclose(end[-1], step)
    return {"ready": ready, "start": end - comm, "end": end, "step": step,
            "exposed": step - ready[-1]}


def overlap_timeline() -> plt.Figure:
    fig, axes = plt.subplots(len(EXAMPLES), 1, figsize=(7.0, 6.9))
    horizon = max(max(overlap_step_time([sum(c)], [sum(m)]) for c, m in EXAMPLES.values()), 1)
    for ax, (name, (compute, comm)) in zip(axes, EXAMPLES.items()):
        rows = []  # (y, label)
        for j, overlap in enumerate((False, True)):
            s = schedule(compute, comm, overlap)
            y_c, y_m = 3.2 - 2.2 * j, 2.4 - 2.2 * j
            mode = "with overlap" if overlap else "without overlap"
            rows += [(y_c, f"{mode}\nbackward"), (y_m, "all-reduce")]
            starts = np.concatenate([[0.0], s["ready"][:-1]])
            for i in range(len(compute)):
                col = PALETTE[i]
                ax.broken_barh([(starts[i], compute[i])], (y_c - 0.3, 0.6),
                               facecolors=col + "66", edgecolors=col, linewidth=0.8)
                ax.broken_barh([(s["start"][i], comm[i])], (y_m - 0.3, 0.6),
                               facecolors=col, edgecolors=col, linewidth=0.8)
                for y0, x0, w in ((y_c, starts[i], compute[i]), (y_m, s["start"][i], comm[i])):
                    if w >= 2:
                        ax.text(x0 + w / 2, y0, f"bucket {i + 1}" if w >= 5 else str(i + 1),
                                ha="center", va="center", fontsize=FONT,
                                color="black" if y0 == y_c else "white")
            t_bwd, step = s["ready"][-1], s["step"]
            ax.annotate("", xy=(step, y_m - 0.45), xytext=(t_bwd, y_m - 0.45),
                        arrowprops=dict(arrowstyle="<->", color=PALETTE[3], lw=1.0,
                                        shrinkA=0, shrinkB=0))
            ax.text((t_bwd + step) / 2, y_m - 0.5, f"exposed {s['exposed']:g}",
                    ha="center", va="top", fontsize=FONT, color=PALETTE[3])
            ax.plot([step, step], [y_c + 0.4, y_m - 0.4], color="0.2", linewidth=1.0,
                    linestyle="--")
            ax.text(step + 0.3, y_c, f"step {step:g}", ha="left", va="center",
                    fontsize=FONT)
        c_txt = ", ".join(f"{v:g}" for v in compute)
        m_txt = ", ".join(f"{v:g}" for v in comm)
        ax.set_title(f"{name}: compute per bucket {c_txt}; all-reduce per bucket {m_txt}",
                     fontsize=FONT + 1, loc="left")
        ax.set_yticks([y for y, _ in rows], [t for _, t in rows], fontsize=FONT)
        ax.set_ylim(-0.9, 3.7)
        ax.set_xlim(0, horizon + 4.5)
        ax.tick_params(axis="x", labelsize=FONT)
        ax.grid(axis="y", visible=False)
        ax.set_axisbelow(True)
    axes[-1].set_xlabel("time since backward started (units)", fontsize=FONT)
    return fig


# ---------------------------------------------------------------------------------------
# no_sync.svg: k micro-batches of one optimizer step, all-reduced every time or only the
# last (the chapter reads these lines). Each backward fills the buckets of the "balanced"
# example above; the forward pass takes NO_SYNC_FORWARD units.
NO_SYNC_K = 4
NO_SYNC_FORWARD = 5


def micro_batches(synced: list[bool]) -> list[dict]:
    """Each micro-batch's start, forward, bucket and all-reduce spans, one after another:
    a synced backward ends when its last all-reduce does (overlap_step_time)."""
    compute, comm = (np.asarray(v, float) for v in EXAMPLES["balanced"])
    out, t = [], 0.0
    for sync in synced:
        s = schedule(compute, comm, overlap=True)
        bwd = t + NO_SYNC_FORWARD
        end = bwd + (s["step"] if sync else compute.sum())
        out.append({"start": t, "bwd": bwd, "ready": bwd + s["ready"], "sync": sync,
                    "comm": [(bwd + a, m) for a, m in zip(s["start"], comm)] if sync
                    else [], "end": end})
        t = end
    return out


def no_sync_timeline() -> plt.Figure:
    k = NO_SYNC_K
    compute, comm = EXAMPLES["balanced"]
    modes = {"without no_sync()": [True] * k,
             f"no_sync() for micro-batches 1 to {k - 1}": [False] * (k - 1) + [True]}
    runs = {name: micro_batches(sync) for name, sync in modes.items()}
    horizon = max(r[-1]["end"] for r in runs.values())
    fig, ax = plt.subplots(figsize=(7.0, 2.5))
    ticks = []
    for j, (name, run) in enumerate(runs.items()):
        y_c, y_m = 3.0 - 2.2 * j, 2.25 - 2.2 * j
        ticks += [(y_c, f"{name}\nforward, backward"), (y_m, "all-reduce")]
        for i, mb in enumerate(run):
            ax.broken_barh([(mb["start"], NO_SYNC_FORWARD)], (y_c - 0.3, 0.6),
                           facecolors="0.9", edgecolors="0.5", linewidth=0.8)
            ax.text(mb["start"] + NO_SYNC_FORWARD / 2, y_c, str(i + 1), ha="center",
                    va="center", fontsize=FONT)
            starts = np.concatenate([[mb["bwd"]], mb["ready"][:-1]])
            for b, (x0, w) in enumerate(zip(starts, compute)):
                col = PALETTE[b]
                ax.broken_barh([(x0, w)], (y_c - 0.3, 0.6), facecolors=col + "66",
                               edgecolors=col, linewidth=0.8)
            for b, (x0, w) in enumerate(mb["comm"]):
                ax.broken_barh([(x0, w)], (y_m - 0.3, 0.6), facecolors=PALETTE[b],
                               edgecolors=PALETTE[b], linewidth=0.8)
        end, n_comm = run[-1]["end"], sum(len(mb["comm"]) for mb in run)
        ax.plot([end, end], [y_c + 0.4, y_m - 0.4], color="0.2", linewidth=1.0,
                linestyle="--")
        ax.text(end + 1, (y_c + y_m) / 2, f"{n_comm} all-reduces,\ndone at {end:g}",
                ha="left", va="center", fontsize=FONT)
    ax.set_yticks([y for y, _ in ticks], [t for _, t in ticks], fontsize=FONT)
    ax.set_ylim(-0.6, 3.5)
    ax.set_xlim(0, horizon + 18)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("time since the first micro-batch began (units)", fontsize=FONT)
    return fig


# ---------------------------------------------------------------------------------------
# sampler.svg: the indices DistributedSampler gives each of RUN_P ranks, for SAMPLER_N
# samples, in two epochs (the chapter reads these lines).
SAMPLER_N = 10
SAMPLER_EPOCHS = (0, 1)


def sampler_order(n: int, p: int, epoch: int) -> tuple[list[int], list[list[int]]]:
    """The padded, shuffled order and each rank's indices, from DistributedSampler."""
    shares = []
    for r in range(p):
        sampler = DistributedSampler(range(n), num_replicas=p, rank=r, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    per_rank = len(shares[0])
    order = [shares[j % p][j // p] for j in range(p * per_rank)]
    assert sorted(set(order)) == list(range(n)) and len(order) == -(-n // p) * p
    assert order[n:] == order[:len(order) - n]  # padding repeats the first indices
    return order, shares


def sampler_figure() -> plt.Figure:
    p, n = RUN_P, SAMPLER_N
    fig, axes = plt.subplots(1, len(SAMPLER_EPOCHS), figsize=(7.0, 1.9))
    orders = []
    for ax, epoch in zip(axes, SAMPLER_EPOCHS):
        order, shares = sampler_order(n, p, epoch)
        orders.append(order)
        w = 0.3
        for j, index in enumerate(order):
            r, x = j % p, j * w
            ax.add_patch(Rectangle((x, 0), w, w, facecolor=PALETTE[r] + "33",
                                   edgecolor=PALETTE[r], linewidth=0.8,
                                   hatch="////" if j >= n else None))
            ax.text(x + w / 2, w / 2, str(index), ha="center", va="center",
                    fontsize=FONT)
        ax.annotate("", xy=(len(order) * w, w + 0.08), xytext=(n * w, w + 0.08),
                    arrowprops=dict(arrowstyle="-", color="0.3", lw=0.8))
        ax.text((n + len(order)) * w / 2, w + 0.12, "padding", ha="center", va="bottom",
                fontsize=FONT, color="0.3")
        ax.text(0, w + 0.12, "shuffled with seed + epoch", ha="left", va="bottom",
                fontsize=FONT, color="0.3")
        for r, share in enumerate(shares):
            y = -0.55 - 0.42 * r
            ax.text(-0.1, y + w / 2, f"rank {r}", ha="right", va="center", fontsize=FONT)
            for i, index in enumerate(share):
                ax.add_patch(Rectangle((i * w, y), w, w, facecolor=PALETTE[r] + "33",
                                       edgecolor=PALETTE[r], linewidth=0.8))
                ax.text(i * w + w / 2, y + w / 2, str(index), ha="center", va="center",
                        fontsize=FONT)
        ax.set_title(f"epoch {epoch}: sampler.set_epoch({epoch})", fontsize=FONT + 1,
                     loc="left")
        ax.set_xlim(-0.75, len(order) * w + 0.05)
        ax.set_ylim(-0.6 - 0.42 * p, w + 0.45)
        ax.set_aspect("equal")
        ax.axis("off")
    assert orders[0] != orders[1]  # set_epoch reshuffles
    return fig


# ---------------------------------------------------------------------------------------
# profiled_step.svg: one DDP step on 2 ranks, from the PyTorch profiler's traces (Lab 4's run).
PROFILED = HERE / "profiled_step.json"


def keep_profiled_step(folder: str, run: str) -> None:
    """Write PROFILED: for each cap, the step of median length of the traces in folder/cap<c>
    (tests/mpi/profile_runs.py's), as labcode.profiling.profiler_events reads them, every
    time in seconds from its rank's step start."""
    import torch

    from dplab.profiles import open_traces
    from dplab.trace import step_lengths
    from labcode.profiling import profiler_events

    kept = {}
    for cap in (5, 50):
        analysis = open_traces(f"{folder}/cap{cap}", range(2), run, "rerun profile_runs.py")
        events = [e for r in range(2) for e in profiler_events(analysis, r)]
        lengths = step_lengths(events)
        middle = sorted(lengths, key=lengths.get)[len(lengths) // 2]
        starts = {e["rank"]: e["start"] for e in events if e["step"] == middle and e["lane"] == "step"}
        kept[str(cap)] = [dict(e, step=0, start=round(e["start"] - starts[e["rank"]], 6),
                               end=round(e["end"] - starts[e["rank"]], 6))
                          for e in events if e["step"] == middle]
    about = (f"one step of DDP on 2 Gloo ranks (Lab 4's wide MLP, one thread each), torch "
             f"{torch.__version__}, read from the PyTorch profiler's traces by HTA's parser")
    PROFILED.write_text(json.dumps({"about": about, "caps": kept}, indent=1) + "\n")


def profiled_step() -> plt.Figure:
    from dplab.trace import plot_timeline

    kept = json.loads(PROFILED.read_text())["caps"]
    fig, axes = plt.subplots(len(kept), 1, figsize=(6.4, 3.4), sharex=True, layout="constrained")
    colours = {"forward": "#aec7e8", "backward": PALETTE[0], "all-reduce": PALETTE[1]}
    for ax, (cap, events) in zip(axes, kept.items()):
        buckets = sum(e["lane"] == "all-reduce" and e["rank"] == 0 for e in events)
        plot_timeline(ax, events, ["compute", "all-reduce"], colours, origin=0,
                      title=f"bucket cap {cap} MiB: {buckets} all-reduce(s) per step")
    return fig


def figures() -> dict[str, bytes]:
    """File name -> SVG bytes of every figure of the two DDP chapters."""
    use_book_style()
    return {"ddp_run.svg": svg_bytes(ddp_run()),
            "buckets.svg": svg_bytes(buckets_figure()),
            "overlap_timeline.svg": svg_bytes(overlap_timeline()),
            "no_sync.svg": svg_bytes(no_sync_timeline()),
            "sampler.svg": svg_bytes(sampler_figure()),
            "profiled_step.svg": svg_bytes(profiled_step())}


def main() -> None:
    if sys.argv[1:2] == ["--traces"]:
        keep_profiled_step(*sys.argv[2:4])
    write_figures(figures(), HERE)


if __name__ == "__main__":
    main()
