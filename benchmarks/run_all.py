"""Run every benchmark script in this folder, one after the other (`make bench`)."""
import subprocess
import sys
from pathlib import Path

here = Path(__file__).parent
failed = []
for script in sorted(here.glob("*.py")):
    if script.name == Path(__file__).name:
        continue
    print(f"\n=== {script.name}", flush=True)
    if subprocess.run([sys.executable, str(script)]).returncode != 0:
        failed.append(script.name)
if failed:
    sys.exit(f"benchmarks failed: {', '.join(failed)}")
