"""Shared fixtures: a clean DPLAB_* environment and process-leak checks. Helpers live in
tests/support (the installed package tests.support), never here."""
import os
import sys

import pytest

from tests.support.processes import descendants, mpich_segments, segments_left, wait_until_gone

BIN = os.path.dirname(sys.executable)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Tests start from defaults: no DPLAB_* overrides, the venv's bin on PATH."""
    for key in list(os.environ):
        if key.startswith("DPLAB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))


@pytest.fixture
def leaves_nothing():
    """Fail if the test leaves a process running or a file of MPICH's in /dev/shm (one that no
    live process maps: tests.support.processes.segments_left)."""
    before, shm = descendants(), mpich_segments()
    yield
    assert wait_until_gone(descendants() - before, timeout=5) == set()
    assert segments_left(shm) == set()
