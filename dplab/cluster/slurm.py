"""Engines across nodes: the MPI-rank engines inside a SLURM allocation, the controller here.

    cluster = dplab.start_cluster(launcher="slurm", nodes=2)      # or DPLAB_LAUNCHER=slurm
                                                                  #    DPLAB_NODES=2

One sbatch job asks for `nodes` nodes and p tasks; its script runs the venv's `mpiexec -n p`,
which (MPICH's Hydra, inside an allocation) starts its proxies on every node with srun, and
the ranks are ipyparallel engines that connect back to the controller in this process. The
rest is as with the local launcher: `dplab.cluster.engine.setup` joins the ranks in one torch
process group, and local_rank counts the ranks on each node. Stopping the cluster cancels
the job (scancel) and waits until squeue no longer lists it; if the kernel dies instead, its
guardian (`dplab.cluster.guard`) cancels the job by its name.

Its settings (`dplab.cluster.settings`): launcher, nodes, partition, and iface, the network
interface the nodes share, required for more than one node: the controller, MPICH, the
rendezvous store and Gloo listen there only.

    cluster = dplab.start_cluster(launcher="allocation")          # or DPLAB_LAUNCHER=allocation

is for a notebook that already runs inside a SLURM job (a JupyterHub whose spawner submits each
learner's server with sbatch: hub/jupyterhub_slurm_config.py). Nothing is submitted: `mpiexec`
starts its proxies on the job's first `nodes` nodes (default: all of them) as one job step
(srun), p ranks split as evenly as they go. The step belongs to the job, so it ends with the
job, and SLURM ends it on every node when its srun dies (the guardian kills srun with the rest).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .errors import ClusterError
from .handle import Cluster
from .launcher import START_TIMEOUT_S, engine_environment, ipp_cluster, wait_for_engines
from .processes import own_cluster_processes
from .network import interface_address, loopback_interface, mpi_environment
from .settings import DEFAULT_NODES, Settings

COMMAND_TIMEOUT_S = 30  # for one sinfo, squeue or scancel
GONE_TIMEOUT_S = 10  # for the job to leave squeue after scancel (a node that went down holds it longer)
EXIT_TIMEOUT_S = 10  # for the engines to exit and end the job by themselves
HEARTBEAT_MS, HEARTBEAT_MISSES = 500, 10  # the controller drops an engine silent for 5 s
PROBE_TIMEOUT_S = 2.0  # for a node's slurmd to accept a connection
# A node of the starting job whose slurmd accepts no connection for this long, while another
# node of the job does, fails the start: its engines cannot start (slurmctld itself notices only
# after its SlurmdTimeout, a minute or more, and the start would wait that long for the job to
# end). When no node answers, slurmd's port is out of this machine's reach (a firewall between
# login and compute nodes): nothing is concluded, and the start waits as before.
NODE_SILENT_S = 10
NODE_PROBE_EVERY_S = 2.0

JOB_NAME = "dplab-engines-{cluster_id}"  # unique: the guardian cancels the job by its name
BATCH_TEMPLATE = """#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=""" + JOB_NAME + """
#SBATCH --nodes={nodes}
#SBATCH --ntasks={n}
#SBATCH --output={output_file}
{partition_line}
exec {mpiexec} -n {n} {program_and_args} --mpi
"""


@dataclass(frozen=True)
class SlurmSettings:
    """Where the engines run: checked against sinfo before anything is submitted."""

    nodes: int
    partition: str  # the partition asked for, or the cluster's default
    cpus_per_node: int  # the partition's smallest node


def _command(*args: str) -> str:
    """Run a SLURM client command, bounded; its stdout, or a ClusterError saying what failed."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(args)}` did not answer in {COMMAND_TIMEOUT_S} s: "
                           "is slurmctld running (check SLURM_CONF)?") from None
    if done.returncode != 0:
        raise ClusterError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _partitions() -> dict[str, tuple[int, int, bool]]:
    """Each partition's (nodes, smallest node's CPUs, is the default), from sinfo."""
    found = {}
    for line in _command("sinfo", "-h", "-o", "%P %D %c").splitlines():
        name, nodes, cpus = line.split()
        default = name.endswith("*")
        name = name.rstrip("*")
        n, c = int(nodes), int(re.match(r"\d+", cpus).group())
        old = found.get(name, (0, c, default))
        found[name] = (old[0] + n, min(old[1], c), default or old[2])
    return found


NO_CONTROLLER = (
    "no SLURM controller answers ({why}). Run the notebook where SLURM's commands reach the "
    "controller: a login node, or a JupyterHub whose spawner starts the notebook inside a SLURM job. "
    "Elsewhere, set SLURM_CONF to the cluster's slurm.conf, or use launcher='mpiexec'")


def _reach_controller() -> dict[str, tuple[int, int, bool]]:
    """The partitions (`_partitions`), or a ClusterError that says no controller answers, and why."""
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # sinfo would retry for 60 s before it says so
        raise ClusterError(NO_CONTROLLER.format(why=f"SLURM_CONF is {conf}, which does not exist"))
    try:
        return _partitions()
    except ClusterError as e:
        # sinfo's last lines say why (its first ones repeat each failed DNS lookup)
        why = "; ".join(line.strip() for line in str(e).splitlines()[-2:] if line.strip())
        raise ClusterError(NO_CONTROLLER.format(why=why.removeprefix("`sinfo -h -o %P %D %c` failed: "))) from None


def partitions() -> dict[str, tuple[int, int, bool]]:
    """Each partition's (nodes, smallest node's CPUs, is the default), from sinfo; a ClusterError
    that says why when no controller answers. The hub's SLURM policy checks a request with it."""
    return _reach_controller()


def resolve_slurm(settings: Settings) -> SlurmSettings:
    """Check a SLURM request against this cluster; raise ClusterError before anything is submitted."""
    for exe in ("sbatch", "sinfo", "squeue", "scancel"):
        if shutil.which(exe) is None:
            raise ClusterError(
                f"{exe} not found on PATH: launcher='slurm' needs SLURM's client commands (sbatch, "
                "sinfo, squeue, scancel) on the machine that runs the notebook. Run where they are, or "
                "use launcher='mpiexec'. (This repository's private test cluster: tools/slurm/start.sh)")
    p, n_nodes, partition = settings.p, settings.nodes or DEFAULT_NODES, settings.partition
    parts = _reach_controller()
    if not parts:
        raise ClusterError("sinfo lists no partition: this SLURM cluster has no nodes to run on")
    if partition is None:
        partition = next((name for name, (_, _, d) in parts.items() if d), next(iter(parts)))
    if partition not in parts:
        raise ClusterError(f"unknown partition {partition!r}: this cluster has {', '.join(sorted(parts))}; "
                           "fix partition= or DPLAB_PARTITION")
    have, cpus, _ = parts[partition]
    if n_nodes > have:
        raise ClusterError(f"{n_nodes} nodes asked for, but partition {partition!r} has {have}: ask for fewer")
    if not n_nodes <= p <= n_nodes * cpus:
        raise ClusterError(
            f"{p} engines on {n_nodes} nodes of {cpus} CPUs: an allocation of {n_nodes} nodes in partition "
            f"{partition!r} holds {n_nodes}..{n_nodes * cpus} engines (at least one per node, at most one "
            "per CPU); change p (DPLAB_ENGINES) or nodes (DPLAB_NODES)")
    return SlurmSettings(n_nodes, partition, cpus)


#: What squeue says, and exits 1, for a job that slurmctld no longer holds: it ended and was
#: purged MinJobAge seconds later (2 s on the private test cluster, 300 by default).
PURGED = "Invalid job id specified"


#: squeue's states of a job whose batch script has ended (squeue(1), JOB STATE CODES). A job stays
#: COMPLETING while a node of it has not confirmed its end: for as long as SlurmdTimeout when a
#: node is unreachable (over 80 s on the private test cluster).
ENDED_STATES = {"COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}


def job_state(job_id: str) -> str | None:
    """squeue's state of the job (RUNNING, COMPLETING, ...), or None once squeue no longer lists
    it: it has ended, even after slurmctld has forgotten it (squeue then fails, saying PURGED)."""
    try:
        return _command("squeue", "-h", "-j", job_id, "-o", "%T").strip() or None
    except ClusterError as e:
        if PURGED in str(e):
            return None
        raise


def job_listed(job_id: str) -> bool:
    """True while squeue still lists the job (pending, running or completing); False once the
    job has ended, even after slurmctld has forgotten it."""
    return job_state(job_id) is not None


class SlurmLauncher:
    """A `Launcher`: `mpiexec` starts the engines inside an sbatch job of their own."""

    silent_after_s = HEARTBEAT_MS / 1000 * (HEARTBEAT_MISSES + 1)

    def __init__(self, slurm: SlurmSettings):
        self.slurm = slurm
        self.job_id: str | None = None
        self.folder: str | None = None  # the batch script and the job's output
        # the job's nodes that accepted no connection while it started: stopping waits for none
        self.silent_nodes: list[str] = []

    def ipp_cluster(self, settings: Settings, mpiexec: str):
        """ipyparallel's SLURM engine launcher, with a batch script that runs mpiexec."""
        from traitlets.config import Config

        s = settings
        self.folder = tempfile.mkdtemp(prefix="dplab-slurm-")
        cfg = Config()
        launcher = cfg.SlurmEngineSetLauncher
        launcher.batch_template = BATCH_TEMPLATE
        launcher.batch_file_name = os.path.join(self.folder, "engines.sbatch")
        launcher.output_file = os.path.join(self.folder, "engines.out")
        # MPICH listens on the interface the nodes share (loopback when there is one node).
        iface = s.iface or loopback_interface()
        launcher.environment = {**mpi_environment(iface), **engine_environment(s.p, s.threads)}
        # A job that already ended (the engines exited) is not an error to stop.
        launcher.delete_command = ["sh", "-c", 'scancel "$0" 2>/dev/null || true']
        launcher.namespace = {
            "nodes": self.slurm.nodes, "mpiexec": mpiexec,
            "partition_line": f"#SBATCH --partition={self.slurm.partition}",
        }
        # The engines on other nodes connect back to the controller on the interface they share.
        return ipp_cluster("slurm", s.p, cfg, heartbeat=(HEARTBEAT_MS, HEARTBEAT_MISSES),
                           controller_ip=interface_address(s.iface) if s.iface else None)

    def job_name(self, cluster_id: str) -> str:
        return JOB_NAME.format(cluster_id=cluster_id)

    def unreachable_nodes(self, hosts: list[str]) -> list[str] | None:
        return unreachable_nodes(hosts)

    def files(self) -> set[str]:
        return {self.folder} - {None}

    def wait_for_engines(self, cluster, client, settings: Settings) -> None:
        """Wait for p engines, or fail early with the job's output if the job ended first."""
        p = settings.p
        (launcher,) = cluster.engines.values()
        self.job_id = launcher.job_id
        deadline = time.monotonic() + START_TIMEOUT_S
        silent_since: dict[str, float] = {}  # the job's nodes that accept no connection, since when
        next_probe = time.monotonic()
        while len(client.ids) < p:
            now = time.monotonic()
            if now > deadline:
                raise ClusterError(f"{len(client.ids)} of {p} engines connected in {START_TIMEOUT_S} s; "
                                   f"job {self.job_id} is still {self._job_state()}: it was cancelled"
                                   + nodes_down(self.slurm.partition))
            if (state := job_state(self.job_id)) is None or state in ENDED_STATES:
                # a node the probe found silent, which slurmctld may not call down for a minute:
                # the job cannot leave squeue before that, and the stop need not wait for it
                self.silent_nodes = sorted(silent_since)
                silent = "".join(f"; {node} has accepted no connection for {now - since:.0f} s"
                                 for node, since in sorted(silent_since.items()))
                raise ClusterError(f"SLURM job {self.job_id} ended before its {p} engines connected"
                                   f"{nodes_down(self.slurm.partition)}{silent}; its output:\n"
                                   f"{self._job_output()}")
            if now >= next_probe:
                next_probe = now + NODE_PROBE_EVERY_S
                nodes = self._job_nodes()
                silent = (unreachable_nodes(nodes) or []) if nodes else []
                if len(silent) == len(nodes):  # none answers: their port is out of reach from here
                    silent = []
                silent_since = {node: silent_since.get(node, now) for node in silent}
                if lost := sorted(n for n, since in silent_since.items() if now - since >= NODE_SILENT_S):
                    self.silent_nodes = lost
                    raise ClusterError(
                        f"{len(client.ids)} of {p} engines connected; SLURM job {self.job_id} runs on "
                        f"{', '.join(lost)}, whose slurmd has accepted no connection for {NODE_SILENT_S} s "
                        "(the node or the link to it is down), so its engines there cannot start: the "
                        "job was cancelled. Start again (SLURM may give other nodes), or tell your admin "
                        f"which node does not answer. The job's output:\n{self._job_output()}")
            time.sleep(0.2)

    def _job_nodes(self) -> list[str]:
        """The nodes the job was given (none while it is pending, or if SLURM cannot say)."""
        try:
            listed = _command("squeue", "-h", "-j", self.job_id, "-o", "%N").strip()
            return _command("scontrol", "show", "hostnames", listed).split() if listed else []
        except ClusterError:
            return []

    def _job_state(self) -> str:
        try:
            return _command("squeue", "-h", "-j", self.job_id, "-o", "%T %R").strip() or "gone"
        except ClusterError:
            return "unknown"

    def _job_output(self) -> str:
        try:
            with open(os.path.join(self.folder, "engines.out")) as f:
                return f.read()[-3000:]
        except (OSError, TypeError):
            return "(none)"

    def after_leaving(self, asked: bool) -> None:
        """Wait until the job ends by itself once its engines were asked to leave; the handle
        then cancels it only if it has not.

        Engines killed by scancel leave MPICH's shared-memory files in every node's /dev/shm,
        where no one removes them; engines that exit call MPI_Finalize, which does. A job with
        a node that accepted no connection as it started cannot end until that node answers:
        no wait then.
        """
        if asked and self.job_id is not None and not self.silent_nodes:
            deadline = time.monotonic() + EXIT_TIMEOUT_S
            try:
                while job_listed(self.job_id) and time.monotonic() < deadline:
                    time.sleep(0.1)
            except ClusterError:
                pass

    def after_stop(self, lost_nodes: list[str]) -> None:
        """ipyparallel cancelled the job when the handle stopped it: make sure squeue no longer
        lists it, and remove the batch script's folder."""
        job, self.job_id = self.job_id, None
        lost_nodes, self.silent_nodes = lost_nodes or self.silent_nodes, []
        if job is not None:
            # A node that does not answer holds the job (COMPLETING) until it answers again.
            deadline = time.monotonic() + (0 if lost_nodes else GONE_TIMEOUT_S)
            try:
                while job_listed(job) and time.monotonic() < deadline:
                    subprocess.run(["scancel", job], capture_output=True, timeout=COMMAND_TIMEOUT_S)
                    time.sleep(0.2)
            except (ClusterError, subprocess.TimeoutExpired):
                pass
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def describe(self, settings: Settings) -> str:
        return f"{settings.p} MPI engines on {self.slurm.nodes} SLURM nodes"


def unreachable_nodes(nodes: list[str]) -> list[str] | None:
    """The nodes whose slurmd does not accept a TCP connection now: the node is down, or its
    link to this machine is (srun reaches slurmd the same way). None if SLURM cannot say."""
    try:
        port = int(re.search(r"SlurmdPort\s*=\s*(\d+)", _command("scontrol", "show", "config")).group(1))
        addrs = {}
        for node in nodes:
            shown = _command("scontrol", "show", "node", node)
            addrs[node] = re.search(r"NodeAddr=(\S+)", shown).group(1)
            if m := re.search(r"\bPort=(\d+)", shown):
                port = int(m.group(1))
    except (ClusterError, AttributeError):
        return None

    def answers(node: str) -> bool:
        try:
            socket.create_connection((addrs[node], port), timeout=PROBE_TIMEOUT_S).close()
            return True
        except OSError:
            return False

    with ThreadPoolExecutor(len(nodes)) as pool:
        return [n for n, ok in zip(nodes, pool.map(answers, nodes)) if not ok]


def nodes_down(partition: str) -> str:
    """"; nodes down or not answering: node2 (down*)" for the partition's nodes that are, else ""."""
    try:
        out = _command("sinfo", "-h", "-N", "-p", partition, "-o", "%N %t")
    except ClusterError:
        return ""
    bad = [f"{node} ({state})" for node, state in (line.split() for line in out.splitlines())
           if state.endswith("*") or state.startswith(("down", "drain", "fail"))]
    return f"; nodes down or not answering: {', '.join(bad)}" if bad else ""


NO_ALLOCATION = (
    "launcher='allocation' starts the engines inside the SLURM job that runs this notebook, and "
    "this process runs in none (SLURM_JOB_ID is unset): use launcher='slurm' to submit a job for "
    "them, or launcher='mpiexec' for engines on this machine")


def expand_nodelist(nodelist: str) -> list[str]:
    """The node names of a SLURM node list ("node[1-3,5],gpu7"), in order, as `scontrol show
    hostnames` would give them (asked of scontrol, which knows every form SLURM writes)."""
    return _command("scontrol", "show", "hostnames", nodelist).split()


def cpus_per_node(text: str) -> int:
    """The smallest count in SLURM_JOB_CPUS_PER_NODE ("2(x2),4": 2)."""
    counts = [int(m) for m in re.findall(r"(?:^|,)(\d+)", text)]
    if not counts:
        raise ClusterError(f"SLURM_JOB_CPUS_PER_NODE={text!r} names no CPU count")
    return min(counts)


def ranks_per_node(p: int, nodes: int) -> list[int]:
    """p ranks over `nodes` nodes, as evenly as they go, the first nodes taking one more."""
    return [p // nodes + (i < p % nodes) for i in range(nodes)]


def resolve_allocation(settings: Settings, env: dict[str, str] | None = None) -> tuple[SlurmSettings, list[str]]:
    """Check a request against the SLURM job this process runs in; (settings, the nodes to use)."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        raise ClusterError(NO_ALLOCATION)
    if shutil.which("scontrol") is None:
        raise ClusterError("scontrol not found on PATH, though this notebook runs in SLURM job "
                           f"{job}: launcher='allocation' needs SLURM's client commands")
    held = expand_nodelist(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", ""))
    n, p = settings.nodes or len(held), settings.p
    if n > len(held):
        raise ClusterError(f"{n} nodes asked for, but this notebook's SLURM job {job} holds {len(held)}: "
                           f"ask for at most {len(held)} (nodes= or DPLAB_NODES), or start a server with more nodes")
    if p < n:
        raise ClusterError(f"{p} engines on {n} nodes: at least one engine per node; raise p (DPLAB_ENGINES) "
                           "or lower nodes (DPLAB_NODES)")
    cpus = cpus_per_node(env.get("SLURM_JOB_CPUS_PER_NODE", "1"))
    return SlurmSettings(n, env.get("SLURM_JOB_PARTITION", ""), cpus), held[:n]


class AllocationLauncher:
    """A `Launcher`: `mpiexec` starts the engines as one job step of this notebook's own job."""

    silent_after_s = HEARTBEAT_MS / 1000 * (HEARTBEAT_MISSES + 1)

    def __init__(self, slurm: SlurmSettings, hosts: list[str]):
        self.slurm = slurm
        self.hosts = hosts
        self.mpiexec: list = []  # its process, once the engines are up

    def ipp_cluster(self, settings: Settings, mpiexec: str):
        """ipyparallel's MPI launcher, with mpiexec told which nodes of the job to use, and how many ranks each."""
        from traitlets.config import Config

        s = settings
        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [mpiexec]
        counts = ranks_per_node(s.p, len(self.hosts))
        cfg.MPILauncher.mpi_args = ["-launcher", "slurm",
                                    "-hosts", ",".join(f"{h}:{c}" for h, c in zip(self.hosts, counts))]
        several = len(self.hosts) > 1
        iface = s.iface if several else loopback_interface()
        cfg.MPILauncher.environment = {**mpi_environment(iface), **engine_environment(max(counts), s.threads)}
        return ipp_cluster("mpi", s.p, cfg, heartbeat=(HEARTBEAT_MS, HEARTBEAT_MISSES),
                           controller_ip=interface_address(s.iface) if several else None)

    def job_name(self, cluster_id: str) -> None:
        return None  # the guardian kills srun with the rest, and SLURM then ends the step everywhere

    def wait_for_engines(self, cluster, client, settings: Settings) -> None:
        wait_for_engines(client, settings.p)
        self.mpiexec = [p for p in own_cluster_processes(cluster.cluster_id) if p.name().startswith("mpiexec")]

    def after_leaving(self, asked: bool) -> None:
        """Wait until mpiexec ends by itself: engines that exit call MPI_Finalize, which removes
        MPICH's shared-memory files on every node; killed ones leave them behind."""
        import psutil

        if asked:
            psutil.wait_procs(self.mpiexec, timeout=EXIT_TIMEOUT_S)

    def after_stop(self, lost_nodes: list[str]) -> None:
        self.mpiexec = []  # the job is the notebook's: nothing to cancel

    def files(self) -> set[str]:
        return set()

    def unreachable_nodes(self, hosts: list[str]) -> list[str] | None:
        return unreachable_nodes(hosts)

    def describe(self, settings: Settings) -> str:
        nodes = f"{len(self.hosts)} node{'s' if len(self.hosts) > 1 else ''}"
        return f"{settings.p} MPI engines on {nodes} of this SLURM job"


def start_in_allocation(settings: Settings, init_torch: bool = True) -> Cluster:
    """dplab.start_cluster(launcher="allocation"): check everything, then start the engines as a
    step of the SLURM job this notebook runs in."""
    slurm, hosts = resolve_allocation(settings)
    if slurm.nodes > 1 and settings.iface is None:
        raise ClusterError(
            f"engines on {slurm.nodes} nodes need the network interface the nodes share: set DPLAB_IFACE "
            "(or iface=) to it; the hub's policy sets it for a server of several nodes")
    return Cluster(settings, AllocationLauncher(slurm, hosts), init_torch=init_torch)._start_alone()


def start(settings: Settings, init_torch: bool = True) -> Cluster:
    """dplab.start_cluster(launcher="slurm"): check everything, then submit the engines' job.

    A port in the settings is for rank 0's node, not this one: only a port the user names is used.
    """
    slurm = resolve_slurm(settings)
    if slurm.nodes > 1 and settings.iface is None:
        raise ClusterError(
            f"engines on {slurm.nodes} nodes need the network interface the nodes share: set DPLAB_IFACE "
            "(or iface=) to it, for example the cluster's Ethernet or InfiniBand IP interface; the "
            "controller, MPICH, the rendezvous store and Gloo then listen there only")
    return Cluster(settings, SlurmLauncher(slurm), init_torch=init_torch)._start_alone()
