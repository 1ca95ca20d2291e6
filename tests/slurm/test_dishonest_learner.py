"""Learners graded at the same time cannot see, change or stop each other's work (issue 63).

Two learners' notebooks of Lab 0 are graded at once as SLURM jobs of one CPU each, sandboxed
(make grade-class). Learner A's notebook has one cell more, which plays the dishonest learner
while B's run is alive: it looks for processes that are not its own run's and tries to signal
them, to read and write the notebook in their working folders, and to read the runs' spool;
it connects to a listener on its node's loopback; it leaves a file in /tmp, /var/tmp, /dev/shm
and /run/lock, and a process that forks away; and it fills its /tmp. Every attempt must fail,
nothing it left may remain, and both learners score full marks, as each would alone. On the
sandbox before issue 63 (one account for every run, the node's process table, network and
/var/tmp shared) A reached B's kernel and notebook, the listener, and left its files."""
import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from dplab.cluster.network import free_port
from tests.support import grading as submissions
from tests.support.slurm import NODES, job_processes, jobs

LAB = "00_meet_your_workers.ipynb"
REASON = None if os.environ.get("DPSLURM_DIR") else "no private SLURM cluster (make test-slurm starts one)"
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
LOOK_S = 40  # how long A looks for another run's processes: both jobs start at once
LEFT = ["/tmp/left-by-a-learner", "/var/tmp/left-by-a-learner", "/dev/shm/left-by-a-learner",
        "/run/lock/left-by-a-learner"]

#: What the listener says to whoever connects: a connection counts as reaching it only if this
#: comes back. The port is free in the test's namespace, but the run's own processes (its
#: controller, engines, mpiexec) pick ports in the sandbox's, and one of them may hold the same
#: number there: the likely cause of a make test-slurm in which A "connected", and which
#: passed when run again.
TOKEN = b"the listener on the node's loopback"
LISTENER = f"""import socket, sys
TOKEN = {TOKEN!r}
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
while True:
    c, _ = s.accept()
    open(sys.argv[2], "a").write("connected\\n"); c.sendall(TOKEN); c.close()
"""


def dishonest(port: int) -> str:
    """A's extra cell: every attempt on another run, and what it reached, asserted empty."""
    return f"""import glob, os, socket, time
import psutil

mine = {{os.getpid()}} | {{c.pid for c in psutil.Process().children(recursive=True)}}
reached = []
deadline = time.monotonic() + {LOOK_S}
while time.monotonic() < deadline and not reached:
    time.sleep(1)
    mine |= {{c.pid for c in psutil.Process().children(recursive=True)}}
    for proc in psutil.process_iter():
        if proc.pid in mine or proc.pid == 1:
            continue
        try:
            if "ipykernel" not in " ".join(proc.cmdline()):
                continue
            os.kill(proc.pid, 0)  # may it be signalled? (0: nothing is sent)
            reached.append(f"signal another run's kernel (pid {{proc.pid}})")
            for nb in glob.glob(os.path.join(proc.cwd(), "*.ipynb")):
                open(nb).read()
                reached.append("read another run's notebook")
                if os.access(nb, os.W_OK):
                    reached.append("write another run's notebook")
        except (psutil.Error, OSError):
            pass
    for nb in glob.glob("/var/tmp/dplab-grade/run-*/labs/*.ipynb"):
        try:
            open(nb).read()
            reached.append("read the runs' spool")
        except OSError:
            pass
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
        s.settimeout(3)
        if s.recv(100) == {TOKEN!r}:  # not one of this run's own processes on the same port
            reached.append("connect to a listener on the node's loopback")
except OSError:
    pass
for path in {LEFT!r}:
    try:
        open(path, "w").write("left by a learner")
    except OSError:
        pass
import errno, subprocess
subprocess.Popen(["sleep", "600"], start_new_session=True)  # forks away: must end with the run
try:
    with open("/tmp/filler", "wb") as f:  # fills its /tmp: bounded, the node's memory is not
        for _ in range(2**8):
            f.write(bytes(2**24))
    reached.append("write 4 GiB into /tmp")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
finally:
    os.unlink("/tmp/filler")
assert not reached, "the learner's code could " + "; ".join(dict.fromkeys(reached))
print("reached nothing of another run")"""


def test_two_learners_graded_at_once_cannot_reach_each_other(tmp_path):
    base = Path(f"/var/tmp/dplab-dishonest-{os.getpid()}")
    folder = base / "submitted"
    connections = tmp_path / "connections.txt"
    port = free_port()
    listeners = [subprocess.Popen(["ip", "netns", "exec", f"dplab-{node}", sys.executable, "-c",
                                   LISTENER, str(port), str(connections)], start_new_session=True)
                 for node in NODES]
    try:
        for who, nb in (("ada", submissions.with_cell(submissions.solved(LAB), "lab0-check-ring",
                                                       dishonest(port))),
                        ("bob", submissions.solved(LAB))):
            (folder / who).mkdir(parents=True)
            nbformat.write(nb, folder / who / LAB)
        time.sleep(1)  # the listeners are up
        done = subprocess.run([sys.executable, "-m", "teach.grade_class", str(folder), "--where", "slurm",
                               "--cpus", "1", "--cell-timeout", str(LOOK_S + 60), "--timeout", "400"],
                              capture_output=True, text=True, timeout=900)
        print(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        out = folder / "_grades"
        with open(out / "grades.csv", newline="") as f:
            got = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
        reports = {who: (out / f"{who}.txt").read_text() for who in got}
        full = submissions.points(LAB)
        assert "errors in the other cells" not in reports["ada"], reports["ada"]  # A's cell passed
        assert got == {"ada": full, "bob": full}, reports
        assert not connections.exists(), "A connected to the listener on its node's loopback"
        assert [path for path in LEFT if os.path.exists(path)] == []
    finally:
        for proc in listeners:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for path in LEFT:
            if os.path.exists(path):
                os.unlink(path)
        shutil.rmtree(base, ignore_errors=True)
    deadline = time.monotonic() + 20
    while (jobs() or job_processes() or submissions.learner_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert jobs() == [] and job_processes() == [] and submissions.learner_processes() == []
