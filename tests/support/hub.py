"""Start a JupyterHub on 127.0.0.1 that loads the sample hub/jupyterhub_config.py, with the test's
own authenticator, spawner, addresses and state (under _build/hub/), and find its processes."""
import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from dplab.cluster.network import free_port
from dplab.cluster.processes import on_parent_death

from tests.support.processes import named

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATE = ROOT / "_build" / "hub"
SAMPLE = ROOT / "hub" / "jupyterhub_config.py"
BIN = pathlib.Path(sys.executable).parent
CHP = BIN.parent / "share" / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
USER = "learner"
ENGINES = 3  # not the labs' default 4, so the lab's engine count can only come from the spawner
MARK = "DPHUB_TEST"  # in the environment of every process the hub starts, at any depth
START_S, STOP_S = 60, 30
#: How long the hub itself may take to stop after SIGTERM. JupyterHub's cleanup stops its managed
#: services one by one (the idle culler: SIGINT, then up to 10 s, SIGTERM 5 s, SIGKILL 5 s:
#: jupyterhub.spawner.LocalProcessSpawner's interrupt, term and kill timeouts), then its servers
#: and proxy; batchspawner's stop runs scancel, then up to 10 squeue polls 1 s apart. So up to
#: 30 s of its own waits before SLURM's commands' own time, which a busy box adds to: 30 s was
#: once too short beside the idle culler (issue 61's flake). A hub that never stops still fails.
HUB_STOP_S = 90
# Lab settings for the learner: no autosave (the stored lab must not change), every cell in the
# DOM (no virtual scrolling), no news fetched from the internet.
LAB_SETTINGS = {
    "docmanager-extension/plugin": {"autosave": False},
    "notebook-extension/tracker": {"windowingMode": "none"},
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def load_sample():
    """The sample config as a module: its policy functions, without the JupyterHub part."""
    spec = importlib.util.spec_from_file_location("hub_policy", SAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marked_processes(mark: str) -> list[psutil.Process]:
    """Live processes whose environment holds MARK=mark."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARK) == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def command_lines(mark: str) -> list[str]:
    """'pid command line' of each live process whose environment holds MARK=mark."""
    out = []
    for proc in marked_processes(mark):
        try:
            out.append(f"{proc.pid} {' '.join(proc.cmdline())}")
        except psutil.Error:
            pass
    return out


def write_lab_settings(folder: pathlib.Path) -> pathlib.Path:
    """LAB_SETTINGS as JupyterLab's settings folder (JUPYTERLAB_SETTINGS_DIR); the folder."""
    for name, values in LAB_SETTINGS.items():
        path = folder / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return folder


def stop_hub(hub: subprocess.Popen, mark: str) -> list[str]:
    """Stop the hub (it stops its services, the servers it spawned and its proxy) within
    HUB_STOP_S, then kill whatever process it started is still alive STOP_S later; 'pid name' of
    each one that was."""
    hub.terminate()
    killed = False
    try:
        hub.wait(HUB_STOP_S)
    except subprocess.TimeoutExpired:
        hub.kill()  # it cannot stop its proxy and servers now
        killed = True
        hub.wait(STOP_S)
    _, alive = psutil.wait_procs(marked_processes(mark), timeout=STOP_S)
    left = named(alive)
    if left and killed:
        left.append(f"(the hub itself had not stopped {HUB_STOP_S} s after SIGTERM, and was killed)")
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=STOP_S)
    return left


def hub_overrides(state: pathlib.Path, port: int, hub_ip: str, password: str, user: str) -> dict:
    """What every test hub sets: the browser's port on 127.0.0.1, the hub's API on `hub_ip` (where
    the servers reach it), the proxy, the hub's state in `state`, and one user with a password."""
    return {
        "JupyterHub.bind_url": f"http://127.0.0.1:{port}",
        "JupyterHub.hub_bind_url": f"http://{hub_ip}:{free_port(hub_ip)}",
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{free_port()}",
        "ConfigurableHTTPProxy.command": [str(CHP)],
        "ConfigurableHTTPProxy.pid_file": str(state / "proxy.pid"),
        "JupyterHub.db_url": f"sqlite:///{state / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(state / "cookie_secret"),
        "JupyterHub.authenticator_class": "dummy",
        "DummyAuthenticator.password": password,
        "Authenticator.allowed_users": {user},
    }


def start_hub(config: pathlib.Path, mark: str, port: int, log: pathlib.Path,
              settings: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Run jupyterhub with `config`, in its folder, its output in `log`. Its environment is this
    process's without DPLAB_* and UCX_TLS (tools/slurm/start.sh's env.sh sets it for ranks on
    different nodes; it breaks MPI on loopback), plus MARK=mark, the venv first on PATH and the
    hub's `settings`. Its process and url once it answers; stop it with stop_hub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_") and k != "UCX_TLS"}
    env.update({MARK: mark, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                **settings})
    with open(log, "w") as out:
        # SIGTERM when the test's process ends, however it ends (SIGKILL included): the hub then
        # stops its servers and proxy even without stop_hub
        proc = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(config)], cwd=config.parent, env=env,
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=on_parent_death(signal.SIGTERM))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_hub(url, proc, log)
    except BaseException:
        stop_hub(proc, mark)
        raise
    return proc, url


def write_config(state: pathlib.Path, port: int, password: str, mark: str) -> pathlib.Path:
    """The test's config: the sample, then the test's overrides."""
    home = state / "home"
    settings = write_lab_settings(state / "lab-settings")
    (home / USER).mkdir(parents=True, exist_ok=True)
    args = ["--allow-root"] if os.geteuid() == 0 else []  # jupyter-server refuses root without it
    # The lab's checkpoints go under _build, not next to the stored lab.
    args.append(f"--FileCheckpoints.root_dir={state / 'checkpoints'}")
    overrides = {
        **hub_overrides(state, port, "127.0.0.1", password, USER),
        "JupyterHub.spawner_class": "simple",
        "SimpleLocalProcessSpawner.home_dir_template": str(home / "{username}"),
        "Spawner.notebook_dir": str(ROOT),
        "Spawner.cmd": [str(BIN / "jupyterhub-singleuser")],
        "Spawner.args": args,
        "Spawner.environment": {MARK: mark, "JUPYTERLAB_SETTINGS_DIR": str(settings),
                                "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces")},
        "Spawner.start_timeout": START_S,
        "Spawner.http_timeout": START_S,
    }
    lines = ["c = get_config()  # noqa", f"load_subconfig({str(SAMPLE)!r})",
             "assert 'pre_spawn_hook' in c.Spawner, 'the sample hub/jupyterhub_config.py was not loaded'"]
    lines += [f"c.{key} = {value!r}" for key, value in overrides.items()]
    path = state / "test_config.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for_hub(url: str, hub: subprocess.Popen, log: pathlib.Path) -> None:
    """Return once the hub answers its API, or fail (bounded) with its log."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if hub.poll() is not None:
            pytest.fail(f"jupyterhub exited with {hub.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/hub/api/", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyterhub did not answer within {START_S} s:\n{log.read_text()[-3000:]}")
