"""The `hub` fixture: a running JupyterHub that stops with every process it started, whatever happens."""
import os
import secrets
import shutil
import subprocess
import types

import pytest

from dplab.cluster.network import free_port
from chromium import CHROMIUM
from hub_process import (BIN, CHP, ENGINES, MARK, ROOT, STATE, USER, marked_processes, stop_hub, wait_for_hub,
                         write_config)


@pytest.fixture
def hub():
    """A running hub: yields its url, user, password, mark and own processes (hub, proxy). On the
    way out, stops it and fails if any process it started (proxy, single-user server, kernel,
    mpiexec, engines) outlives it."""
    if not CHP.exists() or not CHROMIUM.exists():
        pytest.fail("configurable-http-proxy or chromium is missing: run `make test-hub`, which installs them")
    shutil.rmtree(STATE, ignore_errors=True)
    STATE.mkdir(parents=True)
    mark, password = secrets.token_hex(8), secrets.token_hex(8)
    port = free_port()
    config = write_config(STATE, port, password, mark)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    env.update({MARK: mark, "DPLAB_HUB_ENGINES": str(ENGINES), "PYTHONPATH": str(ROOT),
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"})
    log = STATE / "jupyterhub.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(config)], cwd=STATE, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_hub(url, proc, log)
        own = {p.pid for p in marked_processes(mark)}  # the hub and its proxy, before any spawn
        yield types.SimpleNamespace(url=url, user=USER, password=password, mark=mark, own=own)
    finally:
        left = stop_hub(proc, mark)
        assert not left, f"processes outlived the hub (now killed): {left}; see {log}"
