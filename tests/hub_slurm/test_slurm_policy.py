"""The SLURM hub's policy (hub/jupyterhub_slurm_config.py), as plain functions: what each
learner's job asks for, the kit's settings it gets, and the requests refused before sbatch."""
import importlib.util

import pytest

from tests.support.slurm_hub import SAMPLE

spec = importlib.util.spec_from_file_location("slurm_policy", SAMPLE)
policy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(policy)
PARTS = {"debug": (2, 2, True), "big": (8, 64, False)}  # name -> nodes, smallest node's CPUs, default


def test_one_node_runs_its_engines_in_the_job_on_loopback():
    env = policy.job_environment(1, 4, cpus=8)
    assert env == {"DPLAB_ENGINES": "4", "DPLAB_BACKEND": "gloo", "DPLAB_DEVICE": "cpu",
                   "DPLAB_LAUNCHER": "allocation", "DPLAB_NODES": "1", "DPLAB_THREADS": "2"}


def test_two_nodes_split_the_engines_and_name_the_interface():
    env = policy.job_environment(2, 3, cpus=2, iface="ib0")
    assert (env["DPLAB_NODES"], env["DPLAB_IFACE"], env["DPLAB_THREADS"]) == ("2", "ib0", "1")  # 2 + 1 ranks


def test_nccl_only_when_each_of_a_nodes_ranks_owns_a_gpu():
    assert policy.job_environment(2, 4, cpus=8, gpus=2, iface="ib0")["DPLAB_BACKEND"] == "nccl"
    shared = policy.job_environment(2, 4, cpus=8, gpus=1, iface="ib0")
    assert (shared["DPLAB_BACKEND"], shared["DPLAB_DEVICE"]) == ("gloo", "cuda")


def test_requests_the_cluster_cannot_hold_are_refused_with_the_reason():
    assert policy.check_request(2, None, PARTS) == ("debug", 2)
    assert policy.check_request(8, "big", PARTS) == ("big", 64)
    with pytest.raises(policy.HubPolicyError, match="3 nodes asked for, but partition 'debug' has 2: choose fewer"):
        policy.check_request(3, None, PARTS)
    with pytest.raises(policy.HubPolicyError, match="unknown partition 'gpu': this cluster has big, debug"):
        policy.check_request(1, "gpu", PARTS)
    with pytest.raises(policy.HubPolicyError, match="1 engines on 2 nodes"):
        policy.job_environment(2, 1, cpus=2, iface="ib0")


def test_the_hubs_own_settings_are_checked_when_it_starts():
    assert policy.read_settings({"DPHUB_IFACE": "ib0"})["node_choices"] == [1, 2]
    assert policy.read_settings({"DPHUB_NODES": "1"})["iface"] is None
    with pytest.raises(policy.HubPolicyError, match="set DPHUB_IFACE"):
        policy.read_settings({})  # offers 2 nodes by default
    with pytest.raises(policy.HubPolicyError, match="DPHUB_NODES='1,,2'"):
        policy.read_settings({"DPHUB_NODES": "1,,2", "DPHUB_IFACE": "ib0"})
    with pytest.raises(policy.HubPolicyError, match="DPHUB_ENGINES='0' is not a whole number >= 1"):
        policy.read_settings({"DPHUB_ENGINES": "0", "DPHUB_NODES": "1"})
