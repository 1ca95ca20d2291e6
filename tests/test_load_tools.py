"""tools/busy_core.py and tools/load_labs.py (make test-load): nothing they start outlives them,
even when they are killed with SIGKILL."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil

from conftest import descendants, wait_until_gone
from processes import running

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def wait_for(find, timeout=60.0):
    """Poll find() until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not found within {timeout} s")


def test_busy_core_becomes_its_command_and_the_busy_process_dies_with_it():
    before = descendants()
    proc = subprocess.Popen([sys.executable, str(TOOLS / "busy_core.py"), "sleep", "301"])
    burner = wait_for(lambda: [c for c in psutil.Process(proc.pid).children()
                               if "getppid" in " ".join(c.cmdline())])
    assert wait_for(lambda: psutil.Process(proc.pid).cmdline() == ["sleep", "301"]), \
        "busy_core.py did not become the command (exec): a wrapper would be left between"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_until_gone({b.pid for b in burner}, timeout=10) == set(), \
        "the busy process outlived the command it stood beside"
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def test_busy_core_refuses_what_is_not_a_command_before_starting_anything():
    before = descendants()
    out = subprocess.run([sys.executable, str(TOOLS / "busy_core.py"), "no-such-command-xyz"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "is not a command" in out.stderr
    assert descendants() - before == set()


def test_load_labs_refuses_a_notebook_after_conditions_and_says_where_it_goes():
    before = descendants()
    lab = str(TOOLS.parent / "labs" / "04_ddp.ipynb")
    out = subprocess.run([sys.executable, str(TOOLS / "load_labs.py"), "--conditions", "two", lab],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "name the notebooks before --conditions" in out.stderr
    assert descendants() - before == set()


def test_load_labs_killed_with_sigkill_leaves_no_learner_kernel_or_child(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '302'])  # a process the lab started\n"
        "time.sleep(600)  # a lab that times something: in_band( is named here")]
    lab = tmp_path / "labs" / "sleepy.ipynb"
    lab.parent.mkdir()
    nbformat.write(nb, lab)
    before = descendants()
    proc = subprocess.Popen([sys.executable, str(TOOLS / "load_labs.py"), str(lab), "--conditions", "two"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(running(["sleep", "302"])) == 2)           # both learners' labs are running
    started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_until_gone(started, timeout=20) == set(), "a learner's process outlived make test-load"
    assert running(["sleep", "302"]) == []
    assert wait_until_gone(descendants() - before, timeout=5) == set()
