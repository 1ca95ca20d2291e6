"""Sample JupyterHub configuration for an HPC centre: each learner's server is a SLURM job.

batchspawner's SlurmSpawner submits the learner's `jupyterhub-singleuser` with sbatch, as the
learner (its default `sudo -E -u USER`), and the hub's proxy reaches the server on the job's
first node. The labs' engines then run inside that same job (the kit's launcher
`allocation`: one srun step of `mpiexec`), so they stop with it. A learner picks 1 node
(the default) or more on the spawn form; engines span every node of the job.

    jupyterhub -f hub/jupyterhub_slurm_config.py

Settings, in the hub's environment (read by read_settings, here only; never seen by learners):

  DPHUB_PARTITION  the partition the servers run in (default: the cluster's default)
  DPHUB_NODES      the node counts the form offers (default "1,2")
  DPHUB_ENGINES    engines per learner (default 4), split evenly over the job's nodes
  DPHUB_CPUS       CPUs per node the job asks for (default: all of the partition's smallest node)
  DPHUB_GPUS       GPUs per node (--gres=gpu:N; default 0)
  DPHUB_IFACE      the network interface the nodes share (ib0, eth1, ...), needed for a
                       choice of more than one node: engines, MPI and Gloo listen there only
  DPHUB_RUNTIME    the job's time limit, as sbatch --time takes it (default: the partition's)

Each server gets the kit's settings that job_environment computes: DPLAB_LAUNCHER=allocation,
DPLAB_NODES, DPLAB_ENGINES, DPLAB_BACKEND and DPLAB_DEVICE from the kit's one backend policy
(NCCL only when every rank of a node owns one of its GPUs), DPLAB_THREADS (the job's CPUs
shared among a node's engines) and DPLAB_IFACE. They are written into the batch script.

A request the partition cannot hold (more nodes than it has, an unknown partition) fails before
sbatch, with the reason on the learner's spawn page. `make test-hub-slurm` loads this file, with
its own authenticator, users and addresses, on the repository's private SLURM cluster.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from batchspawner import SlurmSpawner
from tornado import web
from traitlets import Unicode, default

from dplab.cluster.errors import ClusterError
from dplab.cluster.settings import DEFAULT_ENGINES, choose_backend, threads_per_rank, to_environment
from dplab.cluster.slurm import partitions, ranks_per_node


class HubPolicyError(ValueError):
    """A server this cluster cannot give a learner."""


def read_settings(env: dict[str, str]) -> dict:
    """The hub's DPHUB_* settings, checked (HubPolicyError says which one is wrong)."""
    out = {"partition": env.get("DPHUB_PARTITION") or None, "iface": env.get("DPHUB_IFACE") or None,
           "runtime": env.get("DPHUB_RUNTIME") or None}
    for key, default in (("ENGINES", DEFAULT_ENGINES), ("CPUS", None), ("GPUS", 0)):
        raw = env.get(f"DPHUB_{key}") or None
        if raw is not None and not (raw.isdigit() and (int(raw) >= 1 or key == "GPUS")):
            raise HubPolicyError(f"DPHUB_{key}={raw!r} is not a whole number >= {int(key != 'GPUS')}: fix or unset it")
        out[key.lower()] = default if raw is None else int(raw)
    choices = env.get("DPHUB_NODES") or "1,2"
    if not re.fullmatch(r"\d+(,\d+)*", choices) or "0" in choices.split(","):
        raise HubPolicyError(f"DPHUB_NODES={choices!r}: give node counts such as 1,2")
    out["node_choices"] = sorted({int(n) for n in choices.split(",")})
    if max(out["node_choices"]) > 1 and out["iface"] is None:
        raise HubPolicyError("DPHUB_NODES offers servers of several nodes: set DPHUB_IFACE to the "
                             "network interface the nodes share, or offer 1 node only")
    return out


def check_request(nodes: int, partition: str | None, parts: dict[str, tuple[int, int, bool]]) -> tuple[str, int]:
    """The partition to use and its smallest node's CPUs, or HubPolicyError before anything is
    submitted. parts: dplab.cluster.slurm.partitions() (name -> nodes, smallest CPUs, default)."""
    if partition is None:
        partition = next((name for name, (_, _, default) in parts.items() if default), None)
        if partition is None:
            raise HubPolicyError("this SLURM cluster has no default partition: set DPHUB_PARTITION")
    if partition not in parts:
        raise HubPolicyError(f"unknown partition {partition!r}: this cluster has {', '.join(sorted(parts))}")
    have, cpus, _ = parts[partition]
    if nodes > have:
        raise HubPolicyError(f"{nodes} nodes asked for, but partition {partition!r} has {have}: choose fewer")
    return partition, cpus


def job_environment(nodes: int, engines: int, cpus: int, gpus: int = 0, iface: str | None = None) -> dict[str, str]:
    """The DPLAB_* settings of a server whose job holds `nodes` nodes of `cpus` CPUs and `gpus` GPUs each."""
    if engines < nodes:
        raise HubPolicyError(f"{engines} engines on {nodes} nodes: at least one per node (DPHUB_ENGINES)")
    busiest = max(ranks_per_node(engines, nodes))
    choice = choose_backend(busiest, gpus)  # NCCL only when each of a node's ranks owns a GPU
    env = to_environment(p=engines, backend=choice.backend, device=choice.device, launcher="allocation",
                         nodes=nodes, threads=threads_per_rank(busiest, cpus),
                         iface=iface if nodes > 1 else None)
    return env


BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=jupyterhub-{{username}}
#SBATCH --output={{homedir}}/jupyterhub_slurmspawner_%j.log
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --partition={{partition}}
#SBATCH --nodes={{nodes}}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={{cpus}}
{% if runtime %}#SBATCH --time={{runtime}}
{% endif %}{% if gpus %}#SBATCH --gres=gpu:{{gpus}}
{% endif %}
set -euo pipefail
# The kit's settings for this server (hub/jupyterhub_slurm_config.py, job_environment):
{{dplab_exports}}
# The server runs in the batch step, not in an srun step of its own: the engines' step
# (launcher "allocation") then gets the job's CPUs on every node.
trap 'echo SIGTERM received' TERM
{{cmd}}
"""


class DplabSlurmSpawner(SlurmSpawner):
    """SlurmSpawner with the book's policy: the spawn form's node count, the request checked
    against sinfo before sbatch, the kit's settings in the batch script, and the server reached
    at the address SLURM knows its node by."""

    batch_script = Unicode(BATCH_SCRIPT).tag(config=True)
    req_srun = Unicode("").tag(config=True)  # see BATCH_SCRIPT

    def settings(self) -> dict:
        return read_settings(dict(os.environ))

    @default("options_form")
    def _options_form_default(self) -> str:
        choices = self.settings()["node_choices"]
        options = "".join(f'<option value="{n}">{n} node{"s" if n > 1 else ""}</option>' for n in choices)
        return f'<label for="nodes">Nodes for this server and its engines</label>' \
               f'<select class="form-control" id="nodes" name="nodes">{options}</select>'

    def options_from_form(self, formdata) -> dict:
        return {"nodes": formdata.get("nodes", ["1"])[0]}

    def request(self) -> dict:
        """This server's job, checked: node count, partition, CPUs, GPUs and the kit's settings."""
        hub = self.settings()
        raw = str(self.user_options.get("nodes", hub["node_choices"][0]))
        if not raw.isdigit() or int(raw) not in hub["node_choices"]:
            raise HubPolicyError(f"nodes={raw!r}: this hub offers {', '.join(map(str, hub['node_choices']))} nodes")
        nodes = int(raw)
        try:
            parts = partitions()
        except ClusterError as e:
            raise HubPolicyError(str(e)) from None
        partition, cpus = check_request(nodes, self.user_options.get("partition") or hub["partition"], parts)
        cpus = min(hub["cpus"] or cpus, cpus)
        env = job_environment(nodes, hub["engines"], cpus, hub["gpus"], hub["iface"])
        return {"nodes": nodes, "partition": partition, "cpus": cpus, "gpus": hub["gpus"],
                "runtime": hub["runtime"], "env": env}

    @default("apply_user_options")
    def _check_before_start(self):
        """JupyterHub's hook for the spawn form's choices (5.3 and later): a request this cluster
        cannot hold is refused here, with its reason on the learner's page, before start()."""
        def check(spawner, user_options) -> None:
            try:
                spawner._dplab_request = spawner.request()
            except HubPolicyError as e:
                raise web.HTTPError(400, str(e)) from None
        return check

    async def start(self):
        request = getattr(self, "_dplab_request", None) or self.request()  # before sbatch, always
        self.environment = {**self.environment, **request["env"]}
        self.log.info("dplab: %s gets a job of %s", self.user.name, request)
        self._dplab_request = request
        return await super().start()

    def get_req_subvars(self) -> dict:
        subvars = super().get_req_subvars()
        request = getattr(self, "_dplab_request", None)
        if request is not None:
            exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(request["env"].items()))
            subvars.update({k: request[k] for k in ("nodes", "partition", "cpus", "gpus", "runtime")},
                           dplab_exports=exports)
        return subvars

    def state_gethost(self) -> str:
        """The job's first node, as the address SLURM reaches it at (NodeAddr): the hub need not
        resolve the node's name."""
        node = super().state_gethost()
        try:
            shown = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True,
                                   timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return node
        found = re.search(r"NodeAddr=(\S+)", shown)
        return found.group(1) if found else node


if "get_config" in globals():  # loaded by JupyterHub (traitlets), not imported by a test
    c = get_config()  # noqa: F821
    read_settings(dict(os.environ))  # a bad DPHUB_* stops the hub here, with its reason
    c.JupyterHub.spawner_class = DplabSlurmSpawner
    # The server, its kernels and engines run the hub's Python environment (jupyterhub-singleuser,
    # batchspawner, dplab), which must sit at the same path on the compute nodes (a shared
    # filesystem, or a module the prologue loads). JupyterHub 6 keeps no PATH for a spawner that is
    # not local: without this, the job would not find batchspawner-singleuser.
    c.Spawner.env_keep = ["PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG", "LC_ALL", "LD_LIBRARY_PATH"]
    c.Spawner.default_url = "/lab"
    # Batch jobs wait in the queue: give them time.
    c.Spawner.start_timeout = 300
    c.Spawner.http_timeout = 120
    # The hub must be reachable from the compute nodes (set hub_connect_ip or hub_bind_url to an
    # address they reach), and one Unix account per learner, as on any HPC system.
    c.JupyterHub.cleanup_servers = True  # a hub that stops cancels the jobs of its servers
    # Idle servers are stopped, so their jobs give the nodes back: the culler, as a hub service.
    c.JupyterHub.load_roles = [{"name": "idle-culler", "services": ["idle-culler"],
                                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}]
    c.JupyterHub.services = [{"name": "idle-culler",
                              "command": [sys.executable, "-m", "jupyterhub_idle_culler", "--timeout=3600"]}]
