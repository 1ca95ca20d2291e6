"""Timelines of what each rank did: a per-rank plot, a Chrome trace, and the arithmetic of intervals.

An event is a dict with `rank`, `step`, `lane` (a row of the plot: "compute", "all-reduce",
"wait", ...), `name`, and `start` and `end` in seconds from a common origin. Labs 4 and 8
record them; this module only draws, writes and measures them.
"""
from __future__ import annotations

import json
from pathlib import Path


def union_length(intervals) -> float:
    """The length of the union of (start, end) intervals: time covered at least once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def covered_within(intervals, window) -> float:
    """How much of the union of `intervals` lies inside `window` = (start, end)."""
    lo, hi = window
    return union_length([(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)])


def chrome_trace(events) -> dict:
    """The events in the Chrome trace format (JSON object form): one process per rank, one
    thread per lane, complete events ("ph": "X") in microseconds. Perfetto and
    chrome://tracing open it."""
    lanes = sorted({e["lane"] for e in events})
    out = []
    for rank in sorted({e["rank"] for e in events}):
        out.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        for tid, lane in enumerate(lanes):
            out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": lane}})
    for e in events:
        out.append({"ph": "X", "name": e["name"], "cat": e["lane"], "pid": e["rank"],
                    "tid": lanes.index(e["lane"]), "ts": round(e["start"] * 1e6, 3),
                    "dur": round((e["end"] - e["start"]) * 1e6, 3), "args": {"step": e["step"]}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(path, events) -> Path:
    """Write chrome_trace(events) to `path` (its folder made if missing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(events)))
    return path


def plot_timeline(ax, events, lanes, colours=None, origin=None, title=None) -> None:
    """One row per (rank, lane), a bar per event, times in ms from `origin` (default: the
    earliest start). `lanes` orders the rows of each rank; `colours` maps a lane or an event's
    name to a colour (the name wins), and the legend names each colour drawn."""
    from matplotlib.patches import Patch

    colours = colours or {}
    origin = min(e["start"] for e in events) if origin is None else origin
    ranks = sorted({e["rank"] for e in events})
    rows = [(r, lane) for r in ranks for lane in lanes]
    drawn = {}  # the colours' keys that were drawn
    for e in events:
        if e["lane"] not in lanes:
            continue
        y = rows.index((e["rank"], e["lane"]))
        key = e["name"] if e["name"] in colours else e["lane"]
        ax.barh(y, 1e3 * (e["end"] - e["start"]), left=1e3 * (e["start"] - origin), height=0.7,
                color=colours.get(key), edgecolor="white", linewidth=0.5)
        if key in colours:
            drawn.setdefault(key, colours[key])
    if drawn:
        ax.legend(handles=[Patch(color=c, label=k) for k, c in colours.items() if k in drawn],
                  fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not on them
    ax.set_yticks(range(len(rows)), [f"rank {r} {lane}" for r, lane in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.grid(axis="y", visible=False)
    if title:
        ax.set_title(title, fontsize=9)


def step_lengths(events) -> dict[int, float]:
    """For each step, the length of its slowest rank's "step" event (what the step cost)."""
    lengths = {}
    for e in events:
        if e["lane"] == "step":
            lengths[e["step"]] = max(lengths.get(e["step"], 0.0), e["end"] - e["start"])
    return lengths


def align_steps(events) -> list[dict]:
    """The events laid end to end, step after step, with every rank's step starting together.

    Each rank's times are taken from the start of its own "step" event (ranks start a step
    together after a barrier; their clocks need not agree, as on two nodes), and step s
    starts when the slowest rank finished step s - 1.
    """
    starts = {}
    for e in events:
        if e["lane"] == "step":
            if (e["rank"], e["step"]) in starts:
                raise ValueError(f"two steps numbered {e['step']} on rank {e['rank']}: number "
                                 "the steps of several runs apart before laying them out")
            starts[e["rank"], e["step"]] = e["start"]
    missing = sorted({(e["rank"], e["step"]) for e in events} - set(starts))
    if missing:
        raise ValueError(f"(rank, step) {missing[:3]} have events but no \"step\" event")
    lengths, offset, at = step_lengths(events), 0.0, {}
    for s in sorted(lengths):
        at[s], offset = offset, offset + lengths[s]
    return [dict(e, start=e["start"] - starts[e["rank"], e["step"]] + at[e["step"]],
                 end=e["end"] - starts[e["rank"], e["step"]] + at[e["step"]]) for e in events]
