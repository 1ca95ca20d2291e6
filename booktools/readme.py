"""Write README.md's timing tables from benchmarks/results/, so no timing in it is typed by hand,
and its table of settings from their one description (dplab/cluster/settings.py).

    python -m booktools.readme           # rewrite the tables in README.md
    python -m booktools.readme --check   # exit 1 if README.md differs from what it would write

Each table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->`.
"""
from __future__ import annotations

import re
import sys

from booktools.pages import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


#: commands.txt (booktools.commands): runs, each from its "$ " line, and their rows
#: "make TARGET   SECONDS s" (TARGET may hold spaces: "test-any-p ANY_P=1").
COMMAND_ROW = re.compile(r"^make (.+?)\s+(\d+) s$", flags=re.M)


def command_runs(text: str) -> list[str]:
    """The runs of commands.txt, each with its header, machine line and rows."""
    return [run for run in re.split(r"(?m)^(?=\$ )", text) if run]


def commands_table() -> str:
    """| command | time | measured | from commands.txt (booktools.commands): each row with the
    commit, machine and date of the run that timed it."""
    text = (RESULTS / "commands.txt").read_text()
    rows = ["Each from a clean clone, with pip's cache warm, the targets of one run one after the other,"
            " except one run beside the next, as `.ci/run` runs it (its time is not added: the next"
            " row's includes waiting for it)"
            " (`benchmarks/results/commands.txt`, written by `python -m booktools.commands`):", "",
            "| command | time | measured |", "|---|---|---|"]
    total = []
    for run in command_runs(text):
        day, commit = re.search(r"# (\d{4}-\d\d-\d\d) [\d:]+ UTC, clean clone of (\w+)", run).groups()
        host = (m.group(1) if (m := re.search(r"^machine: (.*)$", run, flags=re.M))
                else "machine not recorded")
        for target, sec in COMMAND_ROW.findall(run):
            if target.endswith("&"):  # ran beside the next row, which includes waiting for it
                rows.append(f"| `make {target[:-1].strip()}`, beside the next | {minutes(float(sec))} | "
                            f"`{commit}`, {host}, {day} |")
                continue
            rows.append(f"| `make {target}` | {minutes(float(sec))} | `{commit}`, {host}, {day} |")
            total.append(float(sec))
    if len(total) > 1:
        rows.append(f"| all of them | {minutes(sum(total))} | |")
    return "\n".join(rows)


def cluster_table() -> str:
    """| phase | seconds | from cluster_start.txt (benchmarks/cluster_start.py)."""
    text = (RESULTS / "cluster_start.txt").read_text()
    head = re.search(r"(\d+) MPI engines, median of (\d+) on (.*)$", text, flags=re.M)
    value = {k: re.search(rf"{k}\s+([\d.]+) s", text).group(1)
             for k in ("engines ready", "process group joined", "stop", "one-rank error", "stop while stuck")}
    return "\n".join([
        f"`dplab.start_cluster()` with {head.group(1)} engines on {head.group(3)}, median of {head.group(2)} starts,"
        " from `benchmarks/cluster_start.py` (saved in `benchmarks/results/cluster_start.txt`):", "",
        "| phase | seconds |", "|---|---|",
        f"| all {head.group(1)} engines ready (target: at most 4 s) | {value['engines ready']} |",
        f"| process group joined (includes importing torch on every engine) | {value['process group joined']} |",
        f"| stop, every process reaped (target: at most 2 s) | {value['stop']} |",
        f"| a one-rank error raised while the others wait in MPI (target: at most 10 s) | {value['one-rank error']} |",
        f"| stop while the engines are stuck in a collective (target: at most 10 s) | {value['stop while stuck']} |",
    ])


def settings_table() -> str:
    """| variable | argument | meaning | default | from the fields of dplab.cluster.settings.Settings."""
    from dplab.cluster.settings import describe

    return describe()


TABLES = {"commands": commands_table, "cluster_start": cluster_table, "settings": settings_table}


def render(readme: str) -> str:
    """README.md's text with every table written afresh."""
    for name, make in TABLES.items():
        pattern = rf"(<!-- table:{name} -->\n)(?:.*?\n)?(<!-- /table:{name} -->)"
        if not re.search(pattern, readme, flags=re.S):
            raise SystemExit(f"README.md has no <!-- table:{name} --> ... <!-- /table:{name} --> block")
        readme = re.sub(pattern, lambda m: m.group(1) + make() + "\n" + m.group(2), readme, flags=re.S)
    return readme


def main(argv: list[str] | None = None) -> int:
    """Rewrite README.md's tables; with --check, only say whether they differ (exit 1)."""
    argv = sys.argv[1:] if argv is None else argv
    path = ROOT / "README.md"
    old = path.read_text()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print("README.md's tables differ from benchmarks/results/ or dplab/cluster/settings.py: "
                  "run python -m booktools.readme", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
