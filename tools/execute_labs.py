"""Re-execute labs in place and store their outputs: `python tools/execute_labs.py labs/*.ipynb`."""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    nbformat.write(nb, path)
    print(f"{path}: executed in {time.perf_counter() - t0:.0f} s", flush=True)
