"""The results of `make bench-big`, one pair of files per machine: names, reading, drawing.

Each machine that runs `benchmarks/big/bench_big.py` saves benchmarks/results/big_KIND.json
(the numbers) and big_KIND.txt (what it printed), KIND naming its cores, CPU model and GPU
(`machine_kind`), with `_rehearsal` after it for a run at the rehearsal size. The header of
both names the torch release too. `pick_pair` chooses the largest machine that has run it
and the 2-core one; `draw` puts one effect of the two side by side, labelled with each
machine (img/bench_big/make_figures.py stores the three figures).

Nothing here imports torch or MPI: the tests and the figure script read results anywhere.
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
PREFIX = "big_"
SIZES = ("full", "rehearsal")
PARTS = ("scaling", "overlap", "nodes")
#: What identifies a machine; torch and Python may change between two runs of one machine.
IDENTITY = ("cores", "cpu", "gpu")


def slug(text: str) -> str:
    """Lower-case words joined by '-', without trademarks, clock speeds and filler words."""
    filler = r"\((R|TM|C)\)|@\s*[\d.]+\s*GHz|\b(CPU|Processor|\d+-Core)\b"
    text = re.sub(filler, " ", text, flags=re.I)
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def machine_kind(machine: dict) -> str:
    """The part of the file name that names a machine: cores, CPU model, GPU if any."""
    kind = f"{machine['cores']}core-{slug(machine['cpu']) or 'cpu'}"
    return f"{kind}-{slug(machine['gpu'])}" if machine.get("gpu") else kind


def result_paths(machine: dict, size: str, folder: Path = RESULTS) -> tuple[Path, Path]:
    """(json, txt) where a run of this size on this machine is saved."""
    if size not in SIZES:
        raise ValueError(f"size {size!r}: one of {', '.join(SIZES)}")
    stem = PREFIX + machine_kind(machine) + ("" if size == "full" else f"_{size}")
    return Path(folder) / f"{stem}.json", Path(folder) / f"{stem}.txt"


def describe(machine: dict) -> str:
    """One line naming the machine: cores, CPU, GPU, torch."""
    gpu = f" + {machine['gpu']}" if machine.get("gpu") else ", no GPU"
    return f"{machine['cores']}-core {machine['cpu']}{gpu}, torch {machine['torch']}"


def another_machine(path: Path, machine: dict) -> str | None:
    """What is wrong with writing `machine`'s results to `path`: None when the file is absent or
    holds this machine's; otherwise a message naming the machine whose results it holds."""
    try:
        held = json.loads(Path(path).read_text())["machine"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return f"{path} is no result of make bench-big: move it away, or pass another --out"
    if any(held.get(k) != machine.get(k) for k in IDENTITY):
        return (f"{path} holds the results of another machine ({describe(held)}), "
                f"not this one's ({describe(machine)}): pass another --out")
    return None


def save(result: dict, text: str, folder: Path = RESULTS) -> tuple[Path, Path]:
    """Write the result (json) and what the run printed (txt); refuse another machine's files."""
    paths = result_paths(result["machine"], result["size"], folder)
    for path in paths[:1]:
        problem = another_machine(path, result["machine"])
        if problem:
            raise FileExistsError(problem)
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(text)
    return paths


def load_all(folder: Path = RESULTS) -> list[dict]:
    """Every saved result in `folder`, each with "file" (its name) added, sorted by file name."""
    found = []
    for path in sorted(Path(folder).glob(f"{PREFIX}*.json")):
        result = json.loads(path.read_text())
        if isinstance(result, dict) and "machine" in result:
            found.append({**result, "file": path.name})
    return found


def _rank(result: dict) -> tuple:
    """Full runs before rehearsals, then the newest."""
    return (result.get("size") == "full", result.get("date", ""))


def pick_pair(results: list[dict]) -> tuple[dict | None, dict | None]:
    """(the 2-core machine's result, the largest machine's result); either may be None, and the
    largest is None unless it has more cores than the first."""
    if not results:
        return None, None
    two = [r for r in results if r["machine"]["cores"] == 2]
    small = max(two, key=_rank) if two else min(results, key=lambda r: r["machine"]["cores"])
    most = max(r["machine"]["cores"] for r in results)
    top = [r for r in results if r["machine"]["cores"] == most]
    large = max(top, key=lambda r: (r.get("size") == "full", bool(r["machine"].get("gpu")),
                                    r.get("date", "")))
    return small, (large if most > small["machine"]["cores"] else None)


def label(result: dict, sep: str = " ") -> str:
    """The panel title: the machine, and the size when it was a rehearsal (sep before the GPU)."""
    m = result["machine"]
    gpu = f"{sep}+ {m['gpu']}" if m.get("gpu") else ""
    size = " (rehearsal)" if result.get("size") == "rehearsal" else ""
    cpu = re.sub(r"\s*\((R|TM)\)", "", m["cpu"])
    return f"{m['cores']}-core {cpu}{size}{gpu}"


def machines(folder: Path = RESULTS) -> tuple[str, str]:
    """What a chapter says of its bench-big figure's two panels: (left, right)."""
    small, large = pick_pair(load_all(folder))
    left = label(small) if small else "no 2-core machine has run it yet"
    return left, label(large) if large else "no larger machine has run it yet"


def speedups(result: dict) -> dict[str, dict[int, float]]:
    """Configuration -> {p: time at p = 1 / time at p}, from the scaling part."""
    rows = result["scaling"]["rows"]
    one = next(r for r in rows if r["p"] == 1)["seconds"]
    return {name: {r["p"]: one[name] / r["seconds"][name] for r in rows} for name in one}


def summary(result: dict) -> dict[str, float | int | str]:
    """The values a chapter quotes from one result (glue names without a prefix)."""
    m, out = result["machine"], {"cores": result["machine"]["cores"], "machine": label(result)}
    out["torch"] = m["torch"]
    if result.get("scaling", {}).get("status") == "ok":
        s = speedups(result)
        p = max(s["DDP"])
        out.update(p=p, global_batch=result["scaling"]["global_batch"], speedup_ddp=s["DDP"][p],
                   speedup_compute=s["compute only"][p], speedup_after=s["no overlap"][p])
    if result.get("overlap", {}).get("status") == "ok":
        o = result["overlap"]
        out.update(overlap_p=o["p"], overlap_b=o["batch"], **{f"overlap_{k}": v
                                                              for k, v in o["ratios"].items()})
    if result.get("nodes", {}).get("status") == "ok":
        last = result["nodes"]["topology"]["rows"][-1]
        out.update(nodes_mib=last["bytes"] >> 20, nodes_ratio=last["hierarchical"] / last["flat"])
    return out


def _scaling(ax, result: dict) -> None:
    s = speedups(result)
    ps = sorted(s["DDP"])
    ax.plot(ps, ps, ":", color="grey", lw=1, label="ideal (p)")
    for name in ("compute only", "DDP", "no overlap"):
        ax.plot(ps, [s[name][p] for p in ps], "o-", ms=3, label=name)
    ax.set(xlabel="ranks p (one core each)", ylabel="speed-up over p = 1", xticks=ps,
           title=f"global batch {result['scaling']['global_batch']}")
    gpu = result["scaling"].get("gpu") or {}
    if gpu.get("status") == "ok":
        one = next(r for r in result["scaling"]["rows"] if r["p"] == 1)["seconds"]["DDP"]
        ax.text(0.03, 0.97, f"one GPU: {one / gpu['seconds']['DDP']:.0f}x p = 1",
                transform=ax.transAxes, va="top", fontsize=7)


def _overlap(ax, result: dict) -> None:
    from matplotlib.patches import Patch

    o = result["overlap"]
    cap = o["best_hook"].split()[-2]
    bars = {"compute only": ("no\nall-reduce", "grey"),
            "no overlap": ("after\nbackward", "C0"),
            "hook overlap 50 MiB": ("hooks,\n1 bucket", "C1"),
            o["best_hook"]: (f"hooks,\n{cap} MiB", "C2"),
            "DDP bucket_cap_mb=50": ("DDP,\n50 MiB", "C1"),
            "DDP bucket_cap_mb=25": ("DDP,\n25 MiB", "C2")}
    base = o["ms"]["no overlap"]
    ax.bar(range(len(bars)), [o["ms"][n] / base for n in bars],
           color=[c for _, c in bars.values()])
    ax.set_xticks(range(len(bars)), [t for t, _ in bars.values()], fontsize=6)
    ax.set(ylabel="step time / after backward", title=f"p = {o['p']}, B = {o['batch']}")
    ax.legend(handles=[Patch(color="C1", label="cannot overlap"),
                       Patch(color="C2", label="can overlap")], fontsize=6, loc="lower right")


def _nodes(ax, result: dict) -> None:
    topo = result["nodes"]["topology"]
    mib = [r["bytes"] / 2**20 for r in topo["rows"]]
    for i, kind in enumerate(("flat", "hierarchical")):
        ax.loglog(mib, [r[kind] for r in topo["rows"]], "o", color=f"C{i}", label=f"{kind}")
        ax.loglog(mib, [r[f"model_{kind}"] for r in topo["rows"]], "-", color=f"C{i}", lw=1,
                  label=f"{kind}, model")
    ax.set(xlabel="message size (MiB)", ylabel="all-reduce time (s)")


DRAW = {"scaling": _scaling, "overlap": _overlap, "nodes": _nodes}


def draw(small: dict | None, large: dict | None, part: str):
    """One part of two machines' results side by side (left the 2-core one, right the largest),
    each panel titled with its machine; a panel with no such result says why. A figure."""
    import matplotlib.pyplot as plt

    from dplab.plots import use_book_style

    if part not in DRAW:
        raise ValueError(f"part {part!r}: one of {', '.join(DRAW)}")
    use_book_style()
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.0))
    for ax, result, side in zip(axes, (small, large), ("2-core machine", "larger machine")):
        status = (result or {}).get(part, {}).get("status", "no result")
        if result is None or status != "ok":
            why = (f"no {side} has run\nmake bench-big yet" if result is None
                   else "\n".join(textwrap.wrap(status.splitlines()[0], 40)))
            ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=8)
            ax.axis("off")
            ax.set_title(label(result, "\n") if result else side, fontsize=8)
            continue
        DRAW[part](ax, result)
        title = label(result, "\n") + (f"\n{ax.get_title()}" if ax.get_title() else "")
        ax.set_title(title, fontsize=8)
    drawn = [ax for ax in axes if ax.get_legend_handles_labels()[0] and ax.get_legend() is None]
    if drawn:
        drawn[0].legend(fontsize=7)
    return fig
