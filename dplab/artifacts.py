"""Each run of a lab writes its files (checkpoints, traces) in a folder of its own.

Two kernels that run the same lab in one folder at once (two learners sharing a course
folder) would otherwise write the same files: one run's profiler traces replaced the other's,
which then refused them as "written by another run". `run_folder("lab4")` makes
`artifacts/lab4/<run>/`, a fresh name per call, and removes the folders other runs of that lab
left more than KEPT_S ago (a run in progress is younger).
"""
from __future__ import annotations

import os
import shutil
import time
import uuid

#: How long another run's folder is kept: a day, for a learner who opens last night's traces.
KEPT_S = 24 * 3600


def run_folder(lab: str, root: str = "artifacts") -> str:
    """A new folder of its own for this run of `lab` under `root` (absolute path); folders of
    the same lab's other runs older than KEPT_S are removed."""
    base = os.path.join(root, lab)
    os.makedirs(base, exist_ok=True)
    for name in os.listdir(base):
        path = os.path.join(base, name)
        try:
            old = os.path.isdir(path) and time.time() - os.path.getmtime(path) > KEPT_S
        except OSError:  # another kernel removed it meanwhile
            continue
        if old:
            shutil.rmtree(path, ignore_errors=True)
    path = os.path.join(base, uuid.uuid4().hex[:12])
    os.makedirs(path)
    return os.path.abspath(path)
