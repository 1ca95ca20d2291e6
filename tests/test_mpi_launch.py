"""dplab.cluster.jobs: one launcher for MPI jobs, its port policy, and no job left behind after a timeout."""
import re
import time

import pytest

from dplab import ClusterError
from dplab.cluster.jobs import run_job
from dplab.cluster.settings import Settings

from tests.support.processes import descendants, wait_until_gone


def test_every_rank_gets_the_same_free_port_in_dplab_port(tmp_path):
    script = tmp_path / "port.py"
    script.write_text("import os\nfrom mpi4py import MPI\n"
                      "print(f'rank {MPI.COMM_WORLD.Get_rank()} port {os.environ[\"DPLAB_PORT\"]};', flush=True)\n")
    out = run_job(script, 2, timeout=60)
    assert out.returncode == 0, out.stderr
    found = re.findall(r"rank (\d) port (\d+);", out.stdout)  # the ranks' lines may arrive glued together
    assert sorted(r for r, _ in found) == ["0", "1"], out.stdout
    ports = {port for _, port in found}
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536


def test_a_job_past_its_timeout_is_killed_with_every_rank(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\ntime.sleep(600)\n")
    before = descendants()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish in 5 s; its processes were killed"):
        run_job(script, 2, timeout=5)
    assert time.monotonic() - t0 < 30
    assert wait_until_gone(descendants() - before) == set()


def test_job_port_reads_dplab_port_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv("DPLAB_PORT", raising=False)
    assert Settings.read("port") is None
    monkeypatch.setenv("DPLAB_PORT", "29555")
    assert Settings.read("port") == 29555
    monkeypatch.setenv("DPLAB_PORT", "http")
    with pytest.raises(ClusterError, match="DPLAB_PORT='http' is not a port number"):
        Settings.read("port")
