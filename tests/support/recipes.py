"""Run the launch recipes in launch/ and read the line each rank prints (tests only)."""
from __future__ import annotations

import functools
import math
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOAT = r"(-?\d+\.\d+(?:e[-+]?\d+)?)"
# Ranks' lines may arrive glued together when several processes share one pipe.
LINE = re.compile(r"rank (\d+)/(\d+) local_rank (\d+) node (\S+) weights ([0-9a-f]{16}) sums " + FLOAT + " " + FLOAT)
#: float64 weights after 20 steps: p ranks average p partial means where one process takes
#: one mean of the global batch, so they differ in the last bits (~1e-16 relative), while a
#: wrong shard or a sum instead of an average moves them by 1e-3 or more.
REL_TOL = 1e-12
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT")


@dataclass(frozen=True)
class RankLine:
    rank: int
    world_size: int
    local_rank: int
    node: str
    digest: str
    sums: tuple[float, float]


def environment(**extra: str) -> dict[str, str]:
    """This environment with the venv first on PATH and no rank variables of the caller's."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return {**env, **extra}


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run cmd from the repository root in its own session; kill the whole session at the timeout."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} ran past {timeout:g} s and was killed:\n{out}\n{err}") from None
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out}\n{err}"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def rank_lines(stdout: str) -> list[RankLine]:
    """The ranks' lines, in rank order (ranks' output may interleave)."""
    found = [RankLine(int(r), int(w), int(lr), node, digest, (float(s1), float(s2)))
             for r, w, lr, node, digest, s1, s2 in LINE.findall(stdout)]
    return sorted(found, key=lambda line: line.rank)


@functools.lru_cache(maxsize=1)
def reference() -> RankLine:
    """The single-process run of launch/train.py: no launcher, the whole global batch."""
    (line,) = rank_lines(run([sys.executable, "launch/train.py"], timeout=120).stdout)
    return line


def check_training(lines: list[RankLine], world_size: int) -> None:
    """Every rank reports, all hold the same weights, and those equal the single-process run's."""
    assert [line.rank for line in lines] == list(range(world_size)), lines
    assert {line.world_size for line in lines} == {world_size}
    assert len({line.digest for line in lines}) == 1, "the replicas' weights differ"
    ref = reference()
    for got, want in zip(lines[0].sums, ref.sums):
        assert math.isclose(got, want, rel_tol=REL_TOL), (got, want)


def check_mapping(lines: list[RankLine], nodes: list[str], per_node: int) -> None:
    """Ranks fill the nodes in order: rank r runs on nodes[r // per_node] as local rank r % per_node."""
    got = [(line.rank, line.local_rank, line.node) for line in lines]
    want = [(r, r % per_node, nodes[r // per_node]) for r in range(len(nodes) * per_node)]
    assert got == want
