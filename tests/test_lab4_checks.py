"""Lab 4's timing check (labcode.overlap.check_overlap) passes DDP as it is and fails broken DDPs."""
import json
import os
import re

from dplab.cluster.jobs import run_job
from labcode.overlap import TOL

HERE = os.path.dirname(__file__)


def test_overlap_check_passes_ddp_and_fails_a_doubled_or_missing_all_reduce_under_mpiexec():
    """The check compares DDP with several buckets against one bucket, within a tolerance from a
    noise reference. An all-reduce done twice must leave the band on every machine; no all-reduce
    at all must leave it where communication has no core of its own (2 ranks on 2 cores)."""
    out = run_job(os.path.join(HERE, "mpi", "check_overlap_timing.py"), 2, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(re.search(r"RESULT (\{.*\})", out.stdout).group(1))
    assert result["tol"] <= 2 * TOL, f"too noisy to test the check: {result}"
    assert result["ddp"][1] == "pass", result
    assert result["twice"][1] == "fail", result
    if not result["own_resource"]:
        assert result["never"][1] == "fail", result
