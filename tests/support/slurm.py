"""The private SLURM cluster of tools/slurm/start.sh, for tests/slurm and tests/hub_slurm: whether
it answers, what runs on it (it runs only their jobs), its nodes' health, and sbatch."""
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import psutil

from tests.support.recipes import environment, run

SQUEUE = shutil.which("squeue") or "squeue"  # found before a test empties PATH
NODES = ["node1", "node2"]
# The interface the nodes share (DPLAB_IFACE, required across nodes): start.sh's env.sh says.
IFACE = os.environ.get("DPSLURM_IFACE", "")
SLURM_DIR = os.environ.get("DPSLURM_DIR", "")  # read now: conftest clears DPLAB_* for each test
LIMIT_S = 10  # issue 28: a dead kernel's cluster, job included, is gone within 10 s


def _no_cluster_reason() -> str | None:
    """Why these tests cannot run here, or None when the private cluster answers."""
    if not os.environ.get("SLURM_CONF") or not os.environ.get("DPSLURM_DIR"):
        return ("no private SLURM cluster: `make test-slurm` starts one (tools/slurm/start.sh) "
                "and runs these tests on it")
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo does not answer ({e}): start the cluster with tools/slurm/start.sh"
    if sorted(out.split()) != NODES:
        return f"sinfo lists nodes {out.split()}, not {NODES}: this is not tools/slurm/start.sh's cluster"
    if not IFACE:
        return "DPSLURM_IFACE is unset: source the env.sh that tools/slurm/start.sh wrote"
    return None


REASON = _no_cluster_reason()
# Under `make test-slurm` (its env.sh sets DPSLURM_DIR) a cluster that does not answer fails
# every test, rather than skip them all and pass.
REQUIRED = bool(os.environ.get("DPSLURM_DIR"))


def jobs(fields: str = "%i %j %T") -> list[str]:
    """One line per job squeue lists, with squeue's `fields` (default: id, name, state)."""
    out = subprocess.run([SQUEUE, "-h", "-o", fields], capture_output=True, text=True, timeout=30)
    return out.stdout.split("\n")[:-1]


def job_processes() -> list[str]:
    """'pid name job ID' of every live process of a job of this cluster, on any node (the nodes
    share this machine's process table)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            if "SLURM_JOB_ID" in env and env.get("SLURM_CONF") == os.environ["SLURM_CONF"]:
                found.append(f"{proc.pid} {proc.info['name']} job {env['SLURM_JOB_ID']}")
        except psutil.Error:
            continue
    return found


# -- the nodes' health after each test (tests/slurm/conftest.py's fixture) --

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


def sbatch(script: str, tmp_path: Path, timeout: float) -> str:
    """Submit a recipe with sbatch --wait from the repository root; its output. The job's
    TMPDIR is the test's folder (the nodes share this machine's file system): torchrun's agents
    leave their torchelastic_* log folders there, not in /tmp."""
    out, name = tmp_path / "job.out", f"pytest-{uuid.uuid4().hex[:8]}"
    try:
        run(["sbatch", "--wait", f"--job-name={name}", f"--output={out}", script], timeout=timeout,
            env=environment(TMPDIR=str(tmp_path)))
    except AssertionError as e:
        raise AssertionError(f"{e}\njob output:\n{out.read_text() if out.exists() else '(none)'}") from None
    finally:
        subprocess.run(["scancel", "--quiet", f"--name={name}"], timeout=10)
    return out.read_text()
