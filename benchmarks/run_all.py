"""Run every benchmark script in this folder but topology.py, one after the other (`make bench`).

Each script's output is printed and also saved to benchmarks/results/NAME.txt, which the
chapters include verbatim, so the tables they show are the ones a run printed.
"""
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

here = Path(__file__).parent
results = here / "results"
results.mkdir(exist_ok=True)
failed = []
# topology.py needs root and a cluster of its own: make bench-nodes runs it.
for script in sorted(here.glob("*.py")):
    if script.name in (Path(__file__).name, "topology.py"):
        continue
    print(f"\n=== {script.name}", flush=True)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"$ python benchmarks/{script.name}   # run by make bench, {stamp}\n"]
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    if proc.wait() != 0:
        failed.append(script.name)
    else:
        (results / f"{script.stem}.txt").write_text("".join(lines))
if failed:
    sys.exit(f"benchmarks failed: {', '.join(failed)}")
