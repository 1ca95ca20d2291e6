"""The launcher "allocation" (engines as a step of the SLURM job the notebook runs in), checked
without SLURM: what it accepts and refuses, and how it spreads the ranks; and how the sbatch
launcher reads squeue's failures. The hub tests (tests/hub_slurm) run it for real, on 1 node
and on 2; tests/slurm the sbatch launcher."""
import os

import pytest

from dplab.cluster import local, slurm
from dplab.cluster.errors import ClusterError
from dplab.cluster.settings import Settings, in_mpi_job

JOB = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
       "SLURM_JOB_PARTITION": "debug"}


@pytest.fixture
def fake_scontrol(monkeypatch):
    """scontrol show hostnames, as SLURM expands node[1-2]; no SLURM needed."""
    monkeypatch.setattr(slurm.shutil, "which", lambda exe: f"/usr/bin/{exe}")
    monkeypatch.setattr(slurm, "_command", lambda *args: {"node[1-2]": "node1\nnode2\n"}[args[-1]])


def test_a_batch_script_is_no_mpi_rank_but_a_step_task_is(monkeypatch):
    """A notebook server in a SLURM batch script has SLURM_PROCID=0 but no SLURM_STEP_ID: it is
    not one rank of an MPI job (before, a benchmark started there would have waited for ranks)."""
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_STEP_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert not in_mpi_job()
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    assert in_mpi_job()


def test_ranks_split_as_evenly_as_they_go():
    assert slurm.ranks_per_node(3, 2) == [2, 1]
    assert slurm.ranks_per_node(4, 2) == [2, 2]
    assert slurm.ranks_per_node(5, 3) == [2, 2, 1]
    assert slurm.cpus_per_node("2(x2),4") == 2 and slurm.cpus_per_node("36") == 36


def test_the_allocation_gives_its_nodes_and_the_request_is_checked(fake_scontrol):
    got, hosts = slurm.resolve_allocation(Settings(p=3), JOB)
    assert (got.nodes, got.partition, got.cpus_per_node, hosts) == (2, "debug", 2, ["node1", "node2"])
    got, hosts = slurm.resolve_allocation(Settings(p=3, nodes=1), JOB)
    assert (got.nodes, hosts) == (1, ["node1"])
    with pytest.raises(ClusterError, match="3 nodes asked for, but this notebook's SLURM job 42 holds 2"):
        slurm.resolve_allocation(Settings(p=4, nodes=3), JOB)
    with pytest.raises(ClusterError, match="1 engines on 2 nodes: at least one engine per node"):
        slurm.resolve_allocation(Settings(p=1), JOB)


def test_outside_a_slurm_job_the_allocation_launcher_says_what_to_use_instead():
    with pytest.raises(ClusterError, match="runs in none .SLURM_JOB_ID is unset.: use launcher='slurm'"):
        slurm.resolve_allocation(Settings(p=2), {})


def test_several_nodes_need_the_interface_before_anything_starts(fake_scontrol, monkeypatch):
    for k, v in JOB.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ClusterError, match="engines on 2 nodes need the network interface"):
        slurm.start_in_allocation(Settings(p=2, launcher="allocation"))


def test_the_local_launcher_keeps_its_engines_on_this_node_inside_a_slurm_job(monkeypatch):
    """Inside a job of several nodes, MPICH's mpiexec would start ranks on all of them (through
    srun), with its network on loopback: launcher "mpiexec" forks them here instead."""
    launcher = local.MpiexecLauncher()
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config = launcher.ipp_cluster(Settings(p=2), "mpiexec").config
    assert "-launcher" not in config.MPILauncher.get("mpi_args", [])
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert launcher.ipp_cluster(Settings(p=2), "mpiexec").config.MPILauncher.mpi_args == ["-launcher", "fork"]


def test_a_job_slurmctld_has_forgotten_is_not_listed_and_other_failures_still_raise(tmp_path, monkeypatch):
    """A job that ended before its engines connected, and was purged (MinJobAge) between two
    polls: squeue exits 1 with "Invalid job id specified". That is a job no longer listed, so
    start_cluster says the job ended and quotes its output. Before, the squeue failure itself
    was raised ("`squeue -h -j 23 -o %i` failed: ...", make test-slurm, a node never up)."""
    squeue = tmp_path / "squeue"
    squeue.write_text('#!/bin/sh\necho "slurm_load_jobs error: $ANSWER" >&2\nexit 1\n')
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("ANSWER", "Invalid job id specified")  # as squeue words it
    assert slurm.job_listed("23") is False
    monkeypatch.setenv("ANSWER", "Unable to contact slurm controller (connect failure)")
    with pytest.raises(ClusterError, match="Unable to contact"):
        slurm.job_listed("23")


@pytest.mark.parametrize("answers_again, none_answers", [(False, False), (True, False), (False, True)],
                         ids=["never answers", "answers again", "no node answers"])
def test_a_node_of_the_job_that_accepts_no_connection_fails_the_start_soon_and_is_named(
        monkeypatch, answers_again, none_answers):
    """While the engines start, the sbatch launcher probes the job's nodes: one whose slurmd
    accepts no connection for NODE_SILENT_S, while another node's does, fails the start, named,
    long before slurmctld notices (its SlurmdTimeout, after which the job ends: 83 s in make
    test-slurm's test_a_node_that_never_comes_up..., which took 94 s in all). A node silent for
    less, whose engines then connect, is no failure; nor are nodes none of which answers (a
    firewall between this machine and slurmd's port): the start then waits for its timeout, as
    before. Without SLURM: its commands are faked."""
    from types import SimpleNamespace
    import time

    monkeypatch.setattr(slurm, "NODE_SILENT_S", 0.6)
    monkeypatch.setattr(slurm, "NODE_PROBE_EVERY_S", 0.1)
    monkeypatch.setattr(slurm, "START_TIMEOUT_S", 5)
    monkeypatch.setattr(slurm, "job_state", lambda job: "RUNNING")
    t0 = time.monotonic()
    # node2 silent for its first 0.3 s only if it answers again, and the engines connect at 0.8 s
    monkeypatch.setattr(slurm, "unreachable_nodes", lambda nodes: list(nodes) if none_answers else [
        n for n in nodes if n == "node2" and not (answers_again and time.monotonic() - t0 > 0.3)])

    class Client:
        @property
        def ids(self):
            return [0, 1] if answers_again and time.monotonic() - t0 > 0.8 else []

    client = Client()
    launcher = slurm.SlurmLauncher(slurm.SlurmSettings(nodes=2, partition="debug", cpus_per_node=2))
    monkeypatch.setattr(launcher, "_job_nodes", lambda: ["node1", "node2"])
    monkeypatch.setattr(launcher, "_job_output", lambda: "(the job's output)")
    monkeypatch.setattr(launcher, "_job_state", lambda: "RUNNING")
    monkeypatch.setattr(slurm, "nodes_down", lambda partition: "")
    cluster = SimpleNamespace(engines={"0": SimpleNamespace(job_id="7")})
    if answers_again:
        launcher.wait_for_engines(cluster, client, Settings(p=2))
        return
    if none_answers:
        monkeypatch.setattr(slurm, "START_TIMEOUT_S", 1.5)
        with pytest.raises(ClusterError, match=r"0 of 2 engines connected in 1.5 s"):
            launcher.wait_for_engines(cluster, client, Settings(p=2))
        assert launcher.silent_nodes == []
        return
    with pytest.raises(ClusterError, match=r"runs on node2, whose slurmd has accepted no connection") as e:
        launcher.wait_for_engines(cluster, client, Settings(p=2))
    assert time.monotonic() - t0 < 3 and "node1" not in str(e.value)


def test_a_job_that_ends_while_a_node_is_silent_fails_the_start_at_once_naming_the_node(monkeypatch):
    """The job's srun gives up on a node that accepts no connection (12 s in make test-slurm),
    and the batch script ends. slurmctld then keeps the job COMPLETING until that node answers
    or SlurmdTimeout calls it down (over 80 s): squeue still lists it, and lists only that node.
    The start fails once the job is COMPLETING, naming the node the probe found silent. Before,
    it waited for squeue to drop the job: 96 s in a clean clone's make test-slurm beside make
    test-student, against the test's 25 s. Without SLURM: its commands are faked."""
    from types import SimpleNamespace
    import time

    monkeypatch.setattr(slurm, "NODE_PROBE_EVERY_S", 0.1)
    monkeypatch.setattr(slurm, "START_TIMEOUT_S", 5)
    t0 = time.monotonic()
    monkeypatch.setattr(slurm, "job_state", lambda job: "RUNNING" if time.monotonic() - t0 < 0.5 else "COMPLETING")
    monkeypatch.setattr(slurm, "unreachable_nodes", lambda nodes: [n for n in nodes if n == "node2"])
    launcher = slurm.SlurmLauncher(slurm.SlurmSettings(nodes=2, partition="debug", cpus_per_node=2))
    monkeypatch.setattr(launcher, "_job_nodes", lambda: ["node1", "node2"])
    monkeypatch.setattr(launcher, "_job_output", lambda: "(the job's output)")
    monkeypatch.setattr(slurm, "nodes_down", lambda partition: "")
    cluster = SimpleNamespace(engines={"0": SimpleNamespace(job_id="7")})
    client = SimpleNamespace(ids=[])
    with pytest.raises(ClusterError, match=r"SLURM job 7 ended before its 2 engines connected; "
                                           r"node2 has accepted no connection for \d+ s; its output") as e:
        launcher.wait_for_engines(cluster, client, Settings(p=2))
    assert time.monotonic() - t0 < 2 and "node1" not in str(e.value)
    assert launcher.silent_nodes == ["node2"]  # the stop does not wait for the job to leave squeue
