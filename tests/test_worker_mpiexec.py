"""dplab.worker under a real `mpiexec -n 2`, without ipyparallel."""
import os
import subprocess
import sys

import pytest

from dplab.backend import free_port
from dplab.cluster import find_mpiexec

from conftest import rank_lines

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("port", ["auto", "requested"])
def test_worker_init_under_mpiexec_matches_mpi_allreduce(port):
    port = "auto" if port == "auto" else str(free_port())
    cmd = [find_mpiexec(), "-n", "2", sys.executable, os.path.join(HERE, "mpi", "check_worker.py"), port]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = rank_lines(out.stdout, r"rank \d+/\d+: \[[\d, ]+\]")
    assert lines == ["rank 0/2: [4, 6]", "rank 1/2: [4, 6]"]
