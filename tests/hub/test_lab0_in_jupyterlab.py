"""A learner's path: log in to JupyterHub in Chromium, open Lab 0 in JupyterLab, run all cells,
and find every check's `ok` line and the engine count that the spawner's environment asked for.
Then the same learner's kernel is killed (SIGKILL, as the OOM killer does) once its cluster has
started: the cluster goes, the hub and the server stay, and after a restart the lab runs again."""
import hashlib
import os
import re
import signal
import urllib.request

import psutil

from tests.support.hub import ENGINES, STATE
from tests.support.jupyterlab import (
    DEAD_S,
    LAB,
    assert_only_the_hub_is_left,
    assert_the_lab_ran,
    clear_outputs,
    cluster_id_of,
    learners_page,
    menu,
    run_to_setup,
    shut_down_kernel_and_server,
    the_lab,
    the_one,
    wait_for_the_end,
)
from tests.support.kernels import Watched, running


def test_lab0_runs_in_jupyterlab_through_the_hub_with_the_spawners_engines(hub):
    lab, stored, expected, cells, setup_cell = the_lab()
    with learners_page(hub) as page:
        clear_outputs(page)
        menu(page, "Run", "runmenu:run-all")
        run = wait_for_the_end(page, len(cells))
        page.screenshot(path=str(STATE / "lab0.png"))
        shut_down_kernel_and_server(page, hub)

    markdown = run["markdown"]
    raw = [t for t in markdown if re.search(r"^(:::|```)\{", t, re.M)]
    assert len(markdown) == sum(c["cell_type"] == "markdown" for c in cells), len(markdown)
    assert not raw, f"markdown cells show raw MyST directives (is jupyterlab-myst installed?): {raw}"
    assert_the_lab_ran(run, expected, cells, setup_cell)
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == stored, f"{LAB} changed on disk"
    assert_only_the_hub_is_left(hub)


def test_a_killed_kernels_cluster_goes_while_hub_and_server_stay_and_the_lab_runs_again(hub):
    """Issue 28: SIGKILL the learner's kernel once its cluster has started. Within DEAD_S nothing
    of the cluster is left (tests/kernels.py: processes, guardian, MPICH's and ipyparallel's
    files), the hub, its proxy and the learner's server run on and answer, JupyterLab says the
    kernel died, and Kernel > Restart Kernel and Run All Cells runs the lab to its end."""
    lab, stored, expected, cells, setup_cell = the_lab()
    with learners_page(hub) as page:
        run_to_setup(page, setup_cell)

        kernel, server = the_one(hub.mark, "ipykernel_launcher"), the_one(hub.mark, "jupyterhub-singleuser")
        cluster = Watched(kernel)
        cluster.record(cluster_id_of(hub.mark))
        engines = [p for p in cluster.processes if "ipyparallel.engine" in " ".join(p.cmdline())]
        assert len(engines) >= ENGINES, f"{len(engines)} engine processes for {ENGINES} engines"
        os.kill(kernel.pid, signal.SIGKILL)
        seconds = cluster.gone_within(DEAD_S)
        print(f"\nthe learner's kernel SIGKILLed: its cluster gone {seconds:.1f} s later")
        hub_side = [psutil.Process(pid) for pid in hub.own] + [server]
        assert running(hub_side) == hub_side, "the hub, its proxy or the learner's server died with the kernel"
        with urllib.request.urlopen(f"{hub.url}/hub/api/", timeout=10) as answer:
            assert answer.status == 200

        # JupyterLab hears of it (the server restarts a dead kernel by itself), then the learner
        # restarts the kernel and runs the whole lab again.
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for()
        assert "appears to have died" in dialog.inner_text(), dialog.inner_text()
        dialog.locator(".jp-mod-accept").click()
        dialog.wait_for(state="hidden")
        clear_outputs(page)
        menu(page, "Kernel", "runmenu:restart-and-run-all")
        page.locator(".jp-Dialog .jp-mod-accept").click()  # "Restart Kernel?"
        run = wait_for_the_end(page, len(cells))
        page.screenshot(path=str(STATE / "lab0-after-restart.png"))
        assert the_one(hub.mark, "jupyterhub-singleuser").pid == server.pid
        shut_down_kernel_and_server(page, hub)

    assert_the_lab_ran(run, expected, cells, setup_cell)
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == stored, f"{LAB} changed on disk"
    assert_only_the_hub_is_left(hub)
