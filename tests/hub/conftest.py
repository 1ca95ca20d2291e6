"""The `hub` fixture: a running JupyterHub that stops with every process it started, whatever happens."""
import secrets
import shutil
import types

import pytest

from dplab.cluster.network import free_port
from tests.support.browser import CHROMIUM
from tests.support.hub import CHP, ENGINES, STATE, USER, marked_processes, start_hub, stop_hub, write_config


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
    log = STATE / "jupyterhub.log"
    proc, url = start_hub(config, mark, port, log, {"DPHUB_ENGINES": str(ENGINES)})
    try:
        own = {p.pid for p in marked_processes(mark)}  # the hub and its proxy, before any spawn
        yield types.SimpleNamespace(url=url, user=USER, password=password, mark=mark, own=own)
    finally:
        left = stop_hub(proc, mark)
        assert not left, f"processes outlived the hub (now killed): {left}; see {log}"
