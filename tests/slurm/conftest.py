"""The private cluster's nodes after each test: a test that leaves a node drained or down fails,
with SLURM's reason and the node's last log lines, and the node is resumed, so that the tests
after it still run on both nodes instead of failing one after another on a pending job."""
import subprocess
import time

import pytest

from tests.support.slurm import RESUME_S, SCONTROL, SLURM_DIR, USABLE, node_states, why


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
