"""Run the scripts in tests/mpi under mpiexec and read what every rank printed."""
import os
import re
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "mpi"


def lines_matching(stdout: str, pattern: str) -> list[str]:
    """Sorted matches of `pattern` in mpiexec output, where ranks' lines may arrive glued together."""
    return sorted(re.findall(pattern, stdout))


def assert_every_rank_passes(script: str, p: int, checks: list[str], timeout: float = 180) -> None:
    """Run tests/mpi/SCRIPT under `mpiexec -n p`: every rank must print `rank r: CHECK True ...`."""
    from dplab.cluster.jobs import run_job

    out = run_job(os.fspath(SCRIPTS / script), p, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = lines_matching(out.stdout, r"rank \d+:" + "".join(rf" {c} \w+" for c in checks))
    assert lines == sorted(f"rank {r}:" + "".join(f" {c} True" for c in checks) for r in range(p)), (
        out.stdout + out.stderr)
