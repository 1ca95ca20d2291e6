"""The cluster handle knows no launcher: one written here, in under 40 lines, drives it through
start, a %%px cell, a stuck rank and stop, and no launcher subclasses another."""
import ast
from pathlib import Path

import pytest
from traitlets.config import Config

from dplab import StuckRanksError
from dplab.cluster.handle import Cluster
from dplab.cluster.launcher import ipp_cluster, wait_for_engines
from dplab.cluster.network import loopback_interface, mpi_environment
from dplab.cluster.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


class NotesLauncher:
    """mpiexec on this machine, with a note of each call the handle makes."""

    silent_after_s = 0.0

    def __init__(self):
        self.notes = []

    def ipp_cluster(self, settings, mpiexec):
        self.notes.append("build")
        cfg = Config()
        cfg.MPILauncher.mpi_cmd = [mpiexec]
        cfg.MPILauncher.environment = mpi_environment(loopback_interface())
        return ipp_cluster("mpi", settings.p, cfg)

    def job_name(self, cluster_id):
        return None

    def wait_for_engines(self, cluster, client, settings):
        self.notes.append("wait")
        wait_for_engines(client, settings.p)

    def after_leaving(self, asked):
        self.notes.append("left")

    def after_stop(self, lost_nodes):
        self.notes.append("stopped")

    def files(self):
        return set()

    def unreachable_nodes(self, hosts):
        return None

    def describe(self, settings):
        return f"{settings.p} noted engines"


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    yield InteractiveShell.instance()  # what %%px runs in, as in a notebook's kernel
    InteractiveShell.clear_instance()


def test_a_launcher_written_here_drives_the_handle(shell, leaves_nothing):
    launcher = NotesLauncher()
    cluster = Cluster(Settings.resolve(p=2, stuck_after=1), launcher)._start_alone()
    try:
        assert repr(cluster).startswith("<Cluster running: 2 noted engines, backend=gloo")
        assert shell.run_cell("%%px\nx = 10 * rank").success
        assert cluster.view.pull("x") == [0, 10]
        stuck = shell.run_cell(  # rank 1 never comes to the barrier
            "%%px\nimport torch.distributed as dist\nif rank == 0:\n    dist.barrier()")
        assert isinstance(stuck.error_in_exec, StuckRanksError), stuck.error_in_exec
        assert not cluster.running  # the watch stopped it
    finally:
        cluster.stop()
    assert launcher.notes[:2] == ["build", "wait"] and launcher.notes.count("stopped") == 1


def test_no_launcher_subclasses_another_and_slurm_does_not_import_local():
    launchers = {"local": "MpiexecLauncher", "slurm": ("SlurmLauncher", "AllocationLauncher")}
    for module in launchers:
        tree = ast.parse((ROOT / "dplab" / "cluster" / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Launcher"):
                assert node.bases == [], f"{module}.{node.name} subclasses {ast.unparse(node.bases[0])}"
            if isinstance(node, ast.ImportFrom) and module == "slurm":
                assert node.module not in ("local", "dplab.cluster.local"), "slurm.py imports local.py"
