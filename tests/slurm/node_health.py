"""The private cluster's nodes after each test: a test that leaves a node drained or down fails,
with SLURM's reason and the node's last log lines, and the node is resumed, so that the tests
after it still run on both nodes instead of failing one after another on a pending job.

Each module in tests/slurm imports `nodes_stay_usable`. Not a conftest.py: `make test` collects
tests/slurm too, and a second module named conftest replaces tests/conftest.py for every test
module imported after it (tests/test_layout.py checks that no other conftest.py is collected)."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

SLURM_DIR = os.environ.get("DPSLURM_DIR", "")  # tools/slurm/start.sh's env.sh
USABLE = {"idle", "alloc", "mix", "comp"}  # sinfo's short states, with no flag: * is "not responding"
RESUME_S = 60
# found now: a test may take the SLURM commands off PATH (monkeypatch, undone after this check)
SINFO, SCONTROL = shutil.which("sinfo") or "sinfo", shutil.which("scontrol") or "scontrol"


def node_states() -> dict[str, str]:
    """node -> its short state; {} where no controller answers (a test may
    have pointed SLURM elsewhere on purpose: the next test's check sees the cluster again)."""
    try:
        out = subprocess.run([SINFO, "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             timeout=30).stdout
    except subprocess.TimeoutExpired:
        return {}
    return dict(line.split() for line in out.splitlines())


def why(nodes: list[str]) -> str:
    """SLURM's reason for each node, and the last lines of its slurmd log."""
    reasons = subprocess.run([SINFO, "-h", "-R", "-N", "-o", "%n: %E (since %H)"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    tails = []
    for node in nodes:
        log = Path(SLURM_DIR) / "log" / f"slurmd-{node}.log"
        if log.exists():
            tails.append(f"{log.name}, last lines:\n" + "\n".join(log.read_text().splitlines()[-15:]))
    return "\n".join([reasons or "(no reason given)", *tails])


@pytest.fixture(autouse=True)
def nodes_stay_usable():
    yield
    if not SLURM_DIR:  # no private cluster: the tests were skipped
        return
    bad = {node: state for node, state in node_states().items() if state not in USABLE}
    if not bad:
        return
    said = why(sorted(bad))
    for node in bad:
        subprocess.run([SCONTROL, "update", f"NodeName={node}", "State=RESUME"], capture_output=True, timeout=10)
    deadline = time.monotonic() + RESUME_S
    while time.monotonic() < deadline and any(node_states().get(n) not in USABLE for n in bad):
        time.sleep(1)
    pytest.fail(f"this test left {', '.join(f'{n} {s}' for n, s in sorted(bad.items()))} (resumed for the "
                f"tests after it):\n{said}")
