"""What the SLURM hub tests share: the learner, and what runs on the private cluster."""
import os

from tests.support.hub import ROOT

STATE = ROOT / "_build" / "hub-slurm"
USER = "dplab-learner"  # a Unix account (its name, its home), made for the tests and removed after them
ENGINES = 3  # not the labs' 4: the count comes from the hub's policy; on 2 nodes, 2 + 1
IFACE = os.environ.get("DPSLURM_IFACE", "")  # tools/slurm/start.sh's env.sh says
SAMPLE = ROOT / "hub" / "jupyterhub_slurm_config.py"
