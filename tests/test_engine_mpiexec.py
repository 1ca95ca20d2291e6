"""dplab.cluster.engine.setup under a real `mpiexec -n 2`, without ipyparallel, launched by dplab.cluster.jobs.run_job."""
import os

import pytest

from dplab.cluster.jobs import run_job

from tests.support.mpi import lines_matching

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("port", ["auto", "job"])
def test_engine_setup_under_mpiexec_matches_mpi_allreduce(port):
    """'job': the port run_job puts in DPLAB_PORT; 'auto': rank 0 picks one and tells the others."""
    out = run_job(os.path.join(HERE, "mpi", "check_engine.py"), 2, [port], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = lines_matching(out.stdout, r"rank \d+/\d+: \[[\d, ]+\]")
    assert lines == ["rank 0/2: [4, 6]", "rank 1/2: [4, 6]"]
