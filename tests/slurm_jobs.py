"""What runs on the private SLURM cluster (tools/slurm/start.sh), for the tests that check that
nothing is left on it: tests/slurm and tests/hub_slurm. It runs only their jobs."""
import os
import shutil
import subprocess

import psutil

SQUEUE = shutil.which("squeue") or "squeue"  # found before a test empties PATH


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
