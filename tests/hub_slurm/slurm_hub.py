"""What the SLURM hub tests share: the learner, and what runs on the private cluster."""
import os
import shutil
import subprocess

import psutil

from hub_process import ROOT

STATE = ROOT / "_build" / "hub-slurm"
USER = "dplab-learner"  # a Unix account (its name, its home), made for the tests and removed after them
ENGINES = 3  # not the labs' 4: the count comes from the hub's policy; on 2 nodes, 2 + 1
IFACE = os.environ.get("DPLAB_SLURM_IFACE", "")  # tools/slurm/start.sh's env.sh says
SAMPLE = ROOT / "hub" / "jupyterhub_slurm_config.py"
SQUEUE = shutil.which("squeue") or "squeue"


def jobs() -> list[str]:
    """'id name state nodes' of every job the private cluster lists (it runs only ours)."""
    out = subprocess.run([SQUEUE, "-h", "-o", "%i %j %T %N"], capture_output=True, text=True, timeout=30)
    return out.stdout.split("\n")[:-1]


def job_processes() -> list[str]:
    """'pid command' of every live process of a job of the private cluster (on any node)."""
    found = []
    for proc in psutil.process_iter(["status", "cmdline"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            if "SLURM_JOB_ID" in env and env.get("SLURM_CONF") == os.environ["SLURM_CONF"]:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:120]}")
        except psutil.Error:
            continue
    return found


def mpich_files() -> list[str]:
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith("mpich"))
