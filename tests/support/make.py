"""make as a learner runs it, from a test: whatever make runs the tests.

`make test ON=...` (.ci/run) exports ON to its recipes and passes it on to every make started
below it (MAKEFLAGS): a test that runs `make -n test-labs` to read its recipe would read CI's
conditions, not the Makefile's default. `run` clears what a parent make hands down: its
MAKEFLAGS, and every variable the Makefile lets the caller set (`NAME ?= ...`)."""
from __future__ import annotations

import os
import re
import subprocess

from booktools.pages import ROOT

HANDED_DOWN = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def knobs() -> set[str]:
    """The variables the Makefile takes from its caller: those it assigns with ?=."""
    return set(re.findall(r"^([A-Z_]+) \?=", (ROOT / "Makefile").read_text(), re.M))


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) less what a parent make handed down."""
    drop = set(HANDED_DOWN) | knobs()
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in drop}


def run(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`make ARGS` in the repository, as from a shell of its own; its output as text."""
    return subprocess.run(["make", *args], cwd=ROOT, env=environment(env), capture_output=True,
                          text=True, timeout=timeout)
