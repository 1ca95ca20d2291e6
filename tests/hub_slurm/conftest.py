"""The `slurm_hub` fixture: a real JupyterHub whose spawner (hub/jupyterhub_slurm_config.py) submits
each learner's server to the private SLURM cluster, for a learner with a Unix account; on the way out it
stops the hub and fails if anything it started outlives it: a process, a job, an MPICH file."""
import os
import pathlib
import pwd
import secrets
import shutil
import subprocess
import types

import pytest

from dplab.cluster.network import free_port, interface_address
from tests.support.browser import CHROMIUM
from tests.support.hub import (BIN, CHP, MARK, ROOT, hub_overrides, marked_processes, start_hub, stop_hub,
                               write_lab_settings)
from tests.support.slurm import jobs
from tests.support.slurm_hub import ENGINES, IFACE, SAMPLE, STATE, USER


@pytest.fixture(scope="session")
def learner():
    """The learner's Unix account, its home under STATE; removed at the end of the session."""
    if os.geteuid() != 0:
        pytest.fail("the SLURM hub tests need root (a Unix account for the learner): run `make test-hub-slurm` as root")
    home = STATE / "home" / USER
    shutil.rmtree(STATE, ignore_errors=True)
    home.parent.mkdir(parents=True)
    try:
        found = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash", USER], check=True)
    else:  # only a leftover of these tests (killed before their teardown) is theirs to reuse and remove
        if found.pw_dir != str(home):
            pytest.fail(f"a Unix account {USER!r} already exists, with home {found.pw_dir}: not one these tests "
                        f"made (theirs has home {home}), so they will neither use nor remove it. Run the tests "
                        "where no such account exists, or remove it (userdel) if it is a leftover of yours.")
    home.mkdir()
    shutil.chown(home, USER, USER)
    yield types.SimpleNamespace(name=USER, home=home)
    subprocess.run(["pkill", "-KILL", "-u", USER])  # nothing should be left: the tests check it
    subprocess.run(["userdel", USER], check=False)


def write_config(port: int, password: str, mark: str, culler: str | None) -> pathlib.Path:
    """The sample, then the test's overrides: its own addresses, authenticator and state."""
    settings = write_lab_settings(STATE / "lab-settings")
    checkpoints = STATE / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    shutil.chown(checkpoints, USER, USER)
    overrides = {
        # The hub's API on the bridge, where the compute nodes reach it.
        **hub_overrides(STATE, port, interface_address(IFACE), password, USER),
        # The job runs as root, not as the learner: this machine's Python lives under /root,
        # which no other account can read. The learner's account gives the job its HOME (under
        # STATE) and its name; a site's sudo -E -u (batchspawner's default) runs it as the learner.
        "DplabSlurmSpawner.exec_prefix": "",
        "Spawner.notebook_dir": str(ROOT),
        "Spawner.cmd": [str(BIN / "jupyterhub-singleuser")],
        "Spawner.args": ["--allow-root", f"--FileCheckpoints.root_dir={checkpoints}"],
        "Spawner.environment": {MARK: mark, "JUPYTERLAB_SETTINGS_DIR": str(settings),
                                "JUPYTERLAB_WORKSPACES_DIR": str(STATE / "workspaces"),
                                "JUPYTERHUB_ACTIVITY_INTERVAL": "5",
                                # A site's nodes read /etc/slurm/slurm.conf; the private cluster's is here.
                                "SLURM_CONF": os.environ["SLURM_CONF"]},
        "Spawner.start_timeout": 120,
    }
    lines = ["import sys", "c = get_config()  # noqa", f"load_subconfig({str(SAMPLE)!r})",
             "assert c.JupyterHub.spawner_class.__name__ == 'DplabSlurmSpawner', 'the sample was not loaded'"]
    lines += [f"c.{key} = {value!r}" for key, value in overrides.items()]
    lines += [
        # The namespace nodes share one kernel: over TCP only, as between machines (env.sh). One
        # node's ranks keep MPICH's shared memory, and loopback has no UCX transport but shm.
        "def _tcp_between_nodes(spawner):",
        "    if str(spawner.user_options.get('nodes', '1')) != '1':",
        "        spawner.environment = {**spawner.environment, 'UCX_TLS': 'tcp,self'}",
        "c.Spawner.pre_spawn_hook = _tcp_between_nodes",
    ]
    if culler is None:
        lines.append("c.JupyterHub.services, c.JupyterHub.load_roles = [], []")
    else:
        # marked, so that stop_hub finds it if it outlives the hub (a managed service does not
        # inherit the hub's environment)
        lines.append(f"c.JupyterHub.services = [{{'name': 'idle-culler', 'command': [sys.executable, "
                     f"'-m', 'jupyterhub_idle_culler', {culler!r}, '--cull-every=5'], "
                     f"'environment': {{{MARK!r}: {mark!r}}}}}]")
    path = STATE / "test_config.py"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def slurm_hub(learner, request):
    """A running hub: yields its url, user, password and mark. Parameters (indirect): a dict of
    DPHUB_* values, and 'culler': the culler's --timeout=... (default: no culler)."""
    if not CHP.exists() or not CHROMIUM.exists():
        pytest.fail("configurable-http-proxy or chromium is missing: run `make test-hub-slurm`, which installs them")
    if not IFACE or not os.environ.get("SLURM_CONF"):
        pytest.fail("no private SLURM cluster: `make test-hub-slurm` starts one and runs these tests on it")
    params = dict(getattr(request, "param", {}))
    culler = params.pop("culler", None)
    mark, password, port = secrets.token_hex(8), secrets.token_hex(8), free_port()
    config = write_config(port, password, mark, culler)
    log = STATE / f"jupyterhub-{request.node.name}.log".replace("[", "-").replace("]", "")
    settings = {"DPHUB_ENGINES": str(ENGINES), "DPHUB_IFACE": IFACE, "DPHUB_NODES": "1,2", **params}
    proc, url = start_hub(config, mark, port, log, settings)
    try:
        yield types.SimpleNamespace(url=url, user=USER, password=password, mark=mark, log=log,
                                    own={p.pid for p in marked_processes(mark)})
    finally:
        left = stop_hub(proc, mark)  # with cleanup_servers, the hub cancels its servers' jobs
        leftover_jobs = jobs()
        for job in leftover_jobs:
            subprocess.run(["scancel", job.split()[0]], timeout=30)
        assert not left, f"processes outlived the hub (now killed): {left}; see {log}"
        assert not leftover_jobs, f"jobs outlived the hub (now cancelled): {leftover_jobs}; see {log}"
