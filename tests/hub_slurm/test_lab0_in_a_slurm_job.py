"""A learner on an HPC centre's JupyterHub (issue 31): the hub (hub/jupyterhub_slurm_config.py)
submits the learner's server to the private SLURM cluster with batchspawner, the learner runs
Lab 0 in JupyterLab there, in headless Chromium, and the engines run inside that job, on its
node or nodes. Stopping the server, an idle culler or a killed kernel leaves nothing behind:
no process, job or MPICH file on any node."""
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import time

import psutil
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout, sync_playwright

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.hub import STOP_S, command_lines, marked_processes
from tests.support.jupyterlab import (DEAD_S, assert_ok_lines, cluster_id_of, log_in, menu, open_the_lab,
                                      run_to_setup, the_lab, the_one, wait_for_the_end)
from tests.support.kernels import Watched, running
from tests.support.processes import mpich_segments, segments_left, stack_folders, unheld
from tests.support.slurm import job_processes, jobs
from tests.support.slurm_hub import ENGINES, STATE

SPAWN_S = 120  # sbatch, the job's start on its node, and the server's first answer
SETUP = r"<Cluster running: (\d+) MPI engines on (\d+) nodes? of this SLURM job, backend=(\w+), device=(\w+)>"


def host_of(pid: int) -> str:
    """The host name a process sees: each node of the private cluster has its own (UTS namespace)."""
    return subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True,
                          check=True, timeout=10).stdout.strip()


def job_nodes() -> list[str]:
    """The nodes of the one job SLURM lists: the learner's server."""
    (nodelist,) = jobs("%N")
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          check=True, timeout=30).stdout.split()


def engines_of(mark: str) -> list[psutil.Process]:
    """The engines themselves (`python -m ipyparallel.engine`), not mpiexec, srun or hydra's proxies."""
    return [p for p in marked_processes(mark) if p.cmdline()[1:3] == ["-m", "ipyparallel.engine"]]


def spawn(page, hub, nodes: int) -> None:
    """Log in, choose `nodes` on the spawn form, wait for the server's job to run, open Lab 0."""
    log_in(page, hub, r"/hub/spawn")  # the spawn form: how many nodes
    page.select_option("#nodes", str(nodes))
    page.click("input[type=submit], button[type=submit]")
    try:
        page.wait_for_url(re.compile(rf"/user/{hub.user}/lab"), timeout=SPAWN_S * 1000)
    except PlaywrightTimeout:
        # Why: the job's submission, start and failure, in the hub's words.
        said = [line for line in hub.log.read_text().splitlines() if "batchspawner" in line or line.startswith("[E")]
        pytest.fail(f"the server's job did not answer within {SPAWN_S} s; the hub's log said:\n" + "\n".join(said[-12:]))
    open_the_lab(page, hub)


def run_on_two_nodes(page, hub) -> None:
    """Spawn a server of 2 nodes and run Lab 0 up to its set-up cell: engines on both nodes."""
    spawn(page, hub, 2)
    run_to_setup(page, the_lab()[-1])
    assert {host_of(p.pid) for p in engines_of(hub.mark)} == {"node1", "node2"}


@contextlib.contextmanager
def browser_page():
    """A Chromium page; a screenshot of it if the test fails."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            yield page
        except Exception:
            page.screenshot(path=str(STATE / "failure.png"))
            raise
        finally:
            browser.close()


def stop_server(page, hub) -> None:
    """Stop My Server, on the hub's home page."""
    page.goto(f"{hub.url}/hub/home")
    page.click("#stop")
    page.wait_for_selector("#stop", state="hidden", timeout=STOP_S * 1000)


def assert_nothing_left(hub, shm_before: set[str], stacks_before: set[str], within: float = STOP_S) -> None:
    """No job, no process of a job or of the server, no new MPICH file that no live process maps
    (tests.support.processes.segments_left), no new stack folder that no process holds (a
    kernel's whose job SLURM ended, with its guardian: the cluster's epilog removes it): on every
    node (they share this machine's process table, /dev/shm and /tmp)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = {"jobs": jobs(), "jobs' processes": job_processes(),
                "server's processes": [c for c in command_lines(hub.mark) if int(c.split()[0]) not in hub.own],
                "MPICH files": sorted(segments_left(shm_before, settle_s=0)),
                "stack folders": unheld(stack_folders() - stacks_before)}
        if not any(left.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"left {within} s after the server stopped: {left}; see {hub.log}")


@pytest.mark.parametrize("nodes", [1, 2])
def test_lab0_runs_in_the_learners_slurm_job_with_its_engines_on_the_jobs_nodes(slurm_hub, nodes):
    hub, shm, stacks = slurm_hub, mpich_segments(), stack_folders()
    lab, stored, expected, cells, setup_cell = the_lab()
    with browser_page() as page:
        spawn(page, hub, nodes)
        held = job_nodes()
        assert len(held) == nodes, held
        server = the_one(hub.mark, "jupyterhub-singleuser")
        assert host_of(server.pid) == held[0]
        run_to_setup(page, setup_cell)
        hosts = {host_of(p.pid) for p in engines_of(hub.mark)}  # while the engines run
        assert len(engines_of(hub.mark)) == ENGINES
        menu(page, "Run", "notebook:run-all-below")
        run = wait_for_the_end(page, len(cells))
        page.screenshot(path=str(STATE / f"lab0-{nodes}-nodes.png"))
        stop_server(page, hub)

    texts = assert_ok_lines(run, expected, cells, ENGINES)
    setup = re.search(SETUP, texts[setup_cell])
    assert setup, f"the set-up cell printed no cluster in this SLURM job: {texts[setup_cell]!r}"
    assert (int(setup[1]), int(setup[2]), setup[3], setup[4]) == (ENGINES, nodes, "gloo", "cpu"), setup[0]
    assert hosts == set(held), f"engines on {hosts}, the job holds {held}"
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == stored, "Lab 0 changed on disk"
    assert_nothing_left(hub, shm, stacks)
    assert re.search(r"Notebook server job \d+ started at 10\.", hub.log.read_text())


@pytest.mark.parametrize("slurm_hub, nodes, reason", [
    ({"DPHUB_NODES": "1,2,3"}, 3, "3 nodes asked for, but partition 'debug' has 2: choose fewer"),
    ({"DPHUB_PARTITION": "gpu-a100"}, 1, "unknown partition 'gpu-a100': this cluster has debug"),
], indirect=["slurm_hub"], ids=["too-many-nodes", "unknown-partition"])
def test_a_request_the_cluster_cannot_hold_fails_before_sbatch_and_says_why(slurm_hub, nodes, reason):
    hub = slurm_hub
    with browser_page() as page:
        log_in(page, hub, r"/hub/spawn")
        page.select_option("#nodes", str(nodes))
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_selector(f"text={reason}")
        assert jobs() == []
    assert "Job submitted" not in hub.log.read_text()


@pytest.mark.parametrize("slurm_hub", [{"culler": "--timeout=20"}], indirect=True)
def test_the_idle_culler_stops_an_idle_server_and_its_job_kernel_and_engines_go(slurm_hub):
    """jupyterhub-idle-culler as a hub service: 20 s after the learner's last activity (the server
    reports it every 5 s; a busy kernel or an open JupyterLab counts), it stops the server."""
    hub, shm, stacks = slurm_hub, mpich_segments(), stack_folders()
    with browser_page() as page:
        run_on_two_nodes(page, hub)
        assert len(engines_of(hub.mark)) == ENGINES
        assert the_one(hub.mark, "ipykernel_launcher")
    t0 = time.monotonic()  # the learner closed the browser: idle from now
    deleted = re.compile(rf"DELETE /hub/api/users/{hub.user}/server \(idle-culler@")  # logged once stopped
    while (jobs() or not deleted.search(hub.log.read_text())) and time.monotonic() < t0 + 120:
        time.sleep(1)
    assert jobs() == [], f"the idle server's job still runs {time.monotonic() - t0:.0f} s later"
    print(f"\nidle server culled, its job gone {time.monotonic() - t0:.0f} s after the browser closed")
    log = hub.log.read_text()
    assert re.search(rf"Culling server {hub.user} \(inactive for", log), "the culler did not say it culled"
    assert deleted.search(log), "the culler's request to stop the server did not end"
    assert_nothing_left(hub, shm, stacks)


def test_a_killed_kernel_in_the_job_leaves_nothing_and_the_server_stays(slurm_hub):
    """SIGKILL the learner's kernel (as the OOM killer does) once its engines run on both nodes:
    within DEAD_S nothing of the cluster is left, the server and its job run on; then Stop My
    Server leaves nothing at all."""
    hub, shm, stacks = slurm_hub, mpich_segments(), stack_folders()
    with browser_page() as page:
        run_on_two_nodes(page, hub)
        kernel, server = the_one(hub.mark, "ipykernel_launcher"), the_one(hub.mark, "jupyterhub-singleuser")
        cluster = Watched(kernel)
        cluster.record(cluster_id_of(hub.mark))
        os.kill(kernel.pid, signal.SIGKILL)
        seconds = cluster.gone_within(DEAD_S)
        print(f"\nthe learner's kernel SIGKILLed in its SLURM job: its cluster gone {seconds:.1f} s later")
        assert running([server]) == [server] and len(jobs()) == 1, "the server or its job died with the kernel"
        stop_server(page, hub)
    assert_nothing_left(hub, shm, stacks)
