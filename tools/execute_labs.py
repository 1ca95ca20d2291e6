"""Re-execute labs in place and store their outputs: `python tools/execute_labs.py labs/*.ipynb`.

Each lab's wall time goes into benchmarks/results/lab_times.json with the machine's name: the
labs' "About N minutes" and the intro's table are checked against it (tests/prose_numbers.py).
"""
import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from dplab.timing import machine

TIMES = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "lab_times.json"

for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    seconds = time.perf_counter() - t0
    nbformat.write(nb, path)
    record = json.loads(TIMES.read_text()) if TIMES.exists() else {"labs": {}}
    record["labs"][Path(path).stem] = round(seconds, 1)
    record["machine"] = machine()
    TIMES.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{path}: executed in {seconds:.0f} s", flush=True)
