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

from tests.support.processes import descendants, wait_until_gone
from dplab.cluster.settings import max_engines
from tests.support.processes import running_command

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
    wait_for(lambda: len(running_command(["sleep", "302"])) == 2)           # both learners' labs are running
    started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_until_gone(started, timeout=20) == set(), "a learner's process outlived make test-load"
    assert running_command(["sleep", "302"]) == []
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def notebook(path: Path, source: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    return path


def second_learner(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOLS / "second_learner.py"), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_second_learner_refuses_what_is_not_a_command_or_a_notebook_before_starting_anything(tmp_path):
    before = descendants()
    out = second_learner("no-such-command-xyz")
    assert out.returncode != 0 and "is not a command" in out.stderr
    out = second_learner("--lab", str(tmp_path / "missing.ipynb"), "true")
    assert out.returncode != 0 and "no such notebook" in out.stderr
    for bad in ("0", "three", str(max_engines() + 1)):  # the labs' own bounds (dplab settings)
        out = second_learner("--engines", bad, "true")
        assert out.returncode != 0 and f"--engines {bad}: engine count" in out.stderr, out.stderr
    assert descendants() - before == set()


def test_second_learner_runs_its_labs_on_the_engines_it_is_given(tmp_path):
    # make test-torch ON=two-learners counts this learner as make test-any-p's p = 3
    lab = notebook(tmp_path / "labs" / "p.ipynb",
                   "import os\nassert os.environ.get('DPLAB_ENGINES') == '3', os.environ.get('DPLAB_ENGINES')")
    out = second_learner("--engines", "3", "--lab", str(lab), "true")
    assert out.returncode == 0 and "second learner: p.ipynb: ok" in out.stdout, out.stdout + out.stderr
    out = second_learner("--engines", "2", "--lab", str(lab), "true")
    assert out.returncode == 1 and "second learner: 0 passed, 1 failed" in out.stdout, out.stdout


def test_second_learner_fails_when_the_command_or_the_learner_fails(tmp_path):
    good = notebook(tmp_path / "labs" / "good.ipynb", "print('fine')")
    bad = notebook(tmp_path / "labs" / "bad.ipynb", "assert 1 + 1 == 3, 'a broken lab'")
    before = descendants()
    out = second_learner("--lab", str(good), "true")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "second learner: good.ipynb: ok" in out.stdout and "second learner: 1 passed, 0 failed" in out.stdout
    out = second_learner("--lab", str(good), "false")
    assert out.returncode != 0 and "the command ended (exit 1)" in out.stdout
    out = second_learner("--lab", str(good), "--lab", str(bad), "true")
    assert out.returncode == 1 and "second learner: 1 passed, 1 failed (bad.ipynb)" in out.stdout, out.stdout
    assert wait_until_gone(descendants() - before, timeout=10) == set()


def test_second_learner_killed_with_sigkill_leaves_neither_the_command_nor_the_learner(tmp_path):
    lab = notebook(tmp_path / "labs" / "sleepy.ipynb",
                   "import subprocess, time\nchild = subprocess.Popen(['sleep', '303'])\ntime.sleep(600)")
    before = descendants()
    proc = subprocess.Popen([sys.executable, str(TOOLS / "second_learner.py"), "--lab", str(lab),
                             "sleep", "304"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: running_command(["sleep", "303"]) and running_command(["sleep", "304"]))
    started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_until_gone(started, timeout=20) == set(), "the command or the learner outlived second_learner.py"
    assert running_command(["sleep", "303"]) == [] and running_command(["sleep", "304"]) == []
    assert wait_until_gone(descendants() - before, timeout=5) == set()


PARENT = """
import signal, subprocess, sys, time
from dplab.cluster.processes import on_parent_death
arm = on_parent_death(signal.SIGKILL) if sys.argv[1] == "armed" else None
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=arm)
print(child.pid, flush=True)
time.sleep(60)
"""


def orphan_after_sigkill(mode: str) -> bool:
    """Whether the child of a parent killed with SIGKILL is still running 5 s later."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    try:
        child.wait(timeout=5)
        return False
    except psutil.TimeoutExpired:
        child.kill()
        return True


def test_on_parent_death_ends_the_child_of_a_sigkilled_parent():
    # what tools/second_learner.py and the hub tests start their commands with
    assert not orphan_after_sigkill("armed")
    assert orphan_after_sigkill("unarmed")  # without it, the child outlives its parent
