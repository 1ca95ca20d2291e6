"""A pytest plugin for the runner's nbval passes (`pytest --nbval -p booktools.nbval_verdicts`):
once a lab's last cell has run, a row (booktools.learners.Row) with its verdict and the timing
checks it kept (dplab.timing.in_band's records in the lab's artifacts/), which the runner reads
from pytest's output. Column: BOOKTOOLS_COLUMN, else 'nbval'.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from booktools.learners import Row
from dplab.timing import BANDS_FILE


class Verdicts:
    """The cells of the lab now running, and what failed among them."""

    def __init__(self, config):
        self.config = config
        self.lab: Path | None = None
        self.failed: list[str] = []
        self.started = 0.0

    def begin(self, lab: Path) -> None:
        self.lab, self.failed, self.started = lab, [], time.monotonic()
        bands = lab.parent / BANDS_FILE
        bands.parent.mkdir(exist_ok=True)  # in_band keeps its records only where it exists
        bands.unlink(missing_ok=True)

    def end(self) -> None:
        bands = self.lab.parent / BANDS_FILE
        kept = json.loads(bands.read_text()) if bands.exists() else {}
        seconds = time.monotonic() - self.started
        result = (f"ok ({seconds:.0f} s)" if not self.failed else
                  f"FAIL {', '.join(self.failed[:3])}{' ...' if len(self.failed) > 3 else ''} "
                  f"({len(self.failed)} cell(s) failed or differ)")
        row = Row(self.lab.name, os.environ.get("BOOKTOOLS_COLUMN", "nbval"), result, kept)
        self.config.pluginmanager.get_plugin("terminalreporter").write_line(row.line())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        lab = Path(item.path)
        if lab != self.lab:
            self.begin(lab)
        yield
        if nextitem is None or Path(nextitem.path) != lab:
            self.end()

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            name = report.nodeid.split("::")[-1]
            if name not in self.failed:
                self.failed.append(name)


def pytest_configure(config) -> None:
    config.pluginmanager.register(Verdicts(config), "booktools-nbval-verdicts")
