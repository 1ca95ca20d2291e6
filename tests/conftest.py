"""Shared fixtures: a clean DPLAB_* environment and process-leak checks."""
import os
import re
import sys

import psutil
import pytest
from processes import descendants, wait_until_gone

BIN = os.path.dirname(sys.executable)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Tests start from defaults: no DPLAB_* overrides, the venv's bin on PATH."""
    for key in list(os.environ):
        if key.startswith("DPLAB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))


def rank_lines(stdout: str, pattern: str) -> list[str]:
    """Sorted matches of `pattern` in mpiexec output, where ranks' lines may arrive glued together."""
    return sorted(re.findall(pattern, stdout))


def assert_every_rank_passes(script: str, p: int, checks: list[str], timeout: float = 180) -> None:
    """Run tests/mpi/SCRIPT under `mpiexec -n p`: every rank must print `rank r: CHECK True ...`."""
    from dplab.cluster.jobs import run_job

    out = run_job(os.path.join(os.path.dirname(__file__), "mpi", script), p, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = rank_lines(out.stdout, r"rank \d+:" + "".join(rf" {c} \w+" for c in checks))
    assert lines == sorted(f"rank {r}:" + "".join(f" {c} True" for c in checks) for r in range(p)), (
        out.stdout + out.stderr)


def cluster_processes(cluster_id: str) -> list[str]:
    """Names of live processes launched for this cluster (ipyparallel sets IPP_CLUSTER_ID)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            if proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(f"{proc.pid} {proc.info['name']}")
        except psutil.Error:
            continue
    return found


@pytest.fixture
def leaves_nothing():
    """Fail if the test leaves a process running or a file of MPICH's in /dev/shm."""
    before, shm = descendants(), set(os.listdir("/dev/shm"))
    yield
    assert wait_until_gone(descendants() - before, timeout=5) == set()
    assert {f for f in set(os.listdir("/dev/shm")) - shm if f.startswith("mpich")} == set()
