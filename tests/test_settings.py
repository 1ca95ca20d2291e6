"""The one settings object: described once, resolved once, passed whole; and a benchmark's entry point."""
import ast
import os
import pickle
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import dplab
from dplab import ClusterError
from dplab.cluster import settings, start
from dplab.cluster.jobs import run_job
from dplab.cluster.settings import Settings, to_environment

from tests.support.mpi import lines_matching

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_described_once_with_its_variable_check_and_docs():
    names = [f.name for f in fields(Settings)]
    assert names == ["p", "backend", "device", "port", "threads", "timeout", "debug", "stuck_after", "flight_recorder",
                     "iface", "launcher", "nodes", "partition"]
    for f in fields(Settings):
        assert set(f.metadata) == {"env", "parse", "doc", "default_doc"}, f.name
        assert f.metadata["env"].startswith("DPLAB_") and f.metadata["doc"] and f.metadata["default_doc"]
    assert len(set(settings.variables())) == len(names)
    for variable in settings.variables():  # the module's docs and start_cluster's are written from them
        assert variable in settings.__doc__ and variable in dplab.start_cluster.__doc__


def readme_settings_table() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- table:settings -->\n(.*?)<!-- /table:settings -->", text, flags=re.S)
    assert block, "README.md has no <!-- table:settings --> block"
    return block.group(1)


def test_the_readmes_variable_table_lists_exactly_the_settings():
    listed = re.findall(r"^\| `(DPLAB_\w+)` \|", readme_settings_table(), flags=re.M)
    assert listed == settings.variables() + [settings.MNIST_VARIABLE], "run tools/readme_tables.py"


def test_unknown_settings_raise_a_type_error_that_lists_the_valid_ones(leaves_nothing):
    with pytest.raises(TypeError, match=r"unknown setting engines: the settings are p, backend, device, port"):
        dplab.start_cluster(engines=2)
    with pytest.raises(TypeError, match="unknown settings"):
        Settings.for_job(cores=2, ranks=3)
    with pytest.raises(TypeError, match="unknown setting"):
        to_environment(gpu=1)


def test_settings_pickle_whole_for_the_engines():
    s = Settings.resolve(p=2, threads=3, timeout=9, debug="info", stuck_after=1)
    assert pickle.loads(pickle.dumps(s)) == s
    assert (s.threads, s.timeout, s.debug, s.stuck_after) == (3, 9.0, "INFO", 1.0)


def test_settings_written_to_a_childs_environment_read_back_the_same():
    env = to_environment(p=3, backend="gloo", device="cpu", threads=2, timeout=60.0, port=None)
    assert env == {"DPLAB_ENGINES": "3", "DPLAB_BACKEND": "gloo", "DPLAB_DEVICE": "cpu", "DPLAB_THREADS": "2",
                   "DPLAB_TIMEOUT": "60.0"}
    assert Settings.resolve(env) == Settings(p=3, threads=2, timeout=60.0)


def test_one_setting_is_read_with_its_check():
    with pytest.raises(ClusterError, match="DPLAB_THREADS"):
        Settings.read("threads", env={"DPLAB_THREADS": "many"})


def test_a_job_of_several_ranks_on_one_gpu_shares_it_on_gloo(monkeypatch):
    """The one policy for jobs too: 4 ranks and 1 GPU give Gloo on CUDA, not NCCL that cannot run."""
    monkeypatch.setattr(settings, "count_gpus", lambda: 1)
    assert (Settings.for_job(p=4).backend, Settings.for_job(p=4).device) == ("gloo", "cuda")
    assert (Settings.for_job(p=1).backend, Settings.for_job(p=1).device) == ("nccl", "cuda")
    monkeypatch.setenv("DPLAB_ENGINES", "2")
    assert Settings.for_job().p == 2  # outside a job: the job to come, p from the argument or DPLAB_ENGINES


def test_inside_a_job_p_is_the_mpi_world_and_the_port_the_one_run_job_set(tmp_path):
    script = tmp_path / "settings.py"
    script.write_text("import os\nfrom mpi4py import MPI\nfrom dplab.cluster.settings import Settings\n"
                      "s = Settings.for_job()\n"
                      "print(f'rank {MPI.COMM_WORLD.Get_rank()}: p={s.p} port_ok={s.port == int(os.environ[\"DPLAB_PORT\"])}'"
                      " f' {s.backend} {s.device};', flush=True)\n")
    out = run_job(script, 2, timeout=120, env=dict(os.environ, DPLAB_ENGINES="3", DPLAB_DEVICE="cpu"))
    assert out.returncode == 0, out.stderr
    assert lines_matching(out.stdout, r"rank \d: [^;]*") == ["rank 0: p=2 port_ok=True gloo cpu",
                                                          "rank 1: p=2 port_ok=True gloo cpu"]


def test_every_launcher_has_a_start_function():
    assert set(start.START) == set(settings.LAUNCHERS)


def test_the_hub_sample_has_no_copy_of_the_backend_policy():
    """It takes backend and device from choose_backend: no backend or device name of its own."""
    tree = ast.parse((ROOT / "hub" / "jupyterhub_config.py").read_text())
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    assert names.isdisjoint({"nccl", "gloo", "cuda", "cpu"}), names & {"nccl", "gloo", "cuda", "cpu"}


# -- a benchmark's entry point: dplab.cluster.jobs.main -----------------------------------------

BENCHMARK = '''\
"""A toy benchmark: every rank all-reduces a vector of ones."""
import sys

from dplab.cluster import jobs


def add_arguments(ap):
    ap.add_argument("--n", type=int, default=1)


def run(args, job):
    import torch
    import torch.distributed as dist

    t = torch.ones(args.n) * (job.rank + 1)
    dist.all_reduce(t)
    print(f"rank {job.rank}/{job.world_size} {job.settings.backend} {job.device.type} "
          f"repeats {args.repeats} sum {t.tolist()};", flush=True)


sys.exit(jobs.main(__file__, run, ranks=2, add_arguments=add_arguments, repeats=4,
                   check=lambda args: "--n must be at least 1" if args.n < 1 else None))
'''


def test_a_benchmark_is_one_call_that_starts_its_job_and_runs_on_every_rank(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(BENCHMARK)
    env = dict(os.environ, DPLAB_DEVICE="cpu")
    out = subprocess.run([sys.executable, str(script), "--n", "2"], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert lines_matching(out.stdout, r"rank \d/\d [^;]*") == ["rank 0/2 gloo cpu repeats 4 sum [3.0, 3.0]",
                                                          "rank 1/2 gloo cpu repeats 4 sum [3.0, 3.0]"]
    bad = subprocess.run([sys.executable, str(script), "--n", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--n must be at least 1" in bad.stderr
    bad = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, DPLAB_BACKEND="nccl", DPLAB_DEVICE="cpu"))
    assert bad.returncode == 1 and "toy.py: NCCL works on GPU tensors only" in bad.stderr


def test_mnist_is_the_datas_setting_not_the_clusters():
    """load_mnist reads DPLAB_MNIST where it runs; a cluster refuses it as a setting, and no
    engine has it written into its environment (the broken variant: mnist= accepted)."""
    from dplab.cluster.settings import mnist_folder

    assert mnist_folder(env={}) is None
    assert mnist_folder(env={"DPLAB_MNIST": "/m"}) == "/m"
    assert mnist_folder("/arg", env={"DPLAB_MNIST": "/m"}) == "/arg"
    with pytest.raises(TypeError, match="unknown setting mnist"):
        Settings.resolve(p=2, mnist="/data/mnist")
    assert "DPLAB_MNIST" not in (ROOT / "dplab" / "cluster" / "engine.py").read_text()
