"""tools/run_labs.py: the runner behind make test-any-p and make test-gpu."""
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from tests.support.processes import descendants, wait_until_gone
from tests.support.processes import running_command

RUNNER = Path(__file__).resolve().parent.parent / "tools" / "run_labs.py"


def run(*args, env=None):
    return subprocess.run([sys.executable, str(RUNNER), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_gpu_run_without_a_gpu_refuses_before_starting_anything():
    before = descendants()
    out = run("--gpu", env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode != 0
    assert "no GPU is visible" in out.stderr and "nothing was started" in out.stderr
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def test_a_cpu_build_of_torch_on_a_gpu_machine_is_named_with_the_fix():
    sys.path.insert(0, str(RUNNER.parent))
    from run_labs import gpu_problem

    h100 = [{"name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "compute_mode": "Default"}]
    said = gpu_problem("2.13.0+cpu", None, 0, h100)
    assert "CPU build" in said and "--force-reinstall torch==2.13.0 " in said and "570.86.15" in said
    assert "no GPU is visible" in gpu_problem("2.13.0+cpu", None, 0, [])
    assert gpu_problem("2.13.0+cu128", "12.8", 1, h100) is None


def test_gpu_settings_share_the_cores_among_the_engines_and_the_kernel(monkeypatch):
    """On 16 cores with one GPU: the NCCL engine 8 threads and the kernel 8; then 4 gloo engines
    3 each and the kernel 3. Not 16 for the kernel on top of the engines' (Lab 2: 130 s on an H200)."""
    import torch

    sys.path.insert(0, str(RUNNER.parent))
    import run_labs

    h100 = [{"name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "compute_mode": "Default"}]
    monkeypatch.setattr(run_labs, "nvidia_gpus", lambda: h100)
    monkeypatch.setattr(run_labs, "gpu_problem", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: h100[0]["name"])
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    said = []
    settings = run_labs.gpu_settings(said.append)
    threads = [(env["DPLAB_ENGINES"], env["DPLAB_THREADS"], env["OMP_NUM_THREADS"]) for env in settings.values()]
    assert threads == [("1", "8", "8"), ("4", "3", "3")], settings
    assert settings[run_labs.SHARED_GPU]["CUDA_VISIBLE_DEVICES"] == "0"
    assert any("3 torch thread(s) per engine, 3 for the kernel, on 16 cores" in line for line in said), said
    assert run_labs.thread_split(1, 2) == (1, 1) and run_labs.thread_split(4, 2) == (1, 1)


def test_gpu_rehearsal_keeps_the_settings_shape_on_the_cpu():
    sys.path.insert(0, str(RUNNER.parent))
    import run_labs

    settings = run_labs.gpu_settings(lambda line: None, rehearse=True)
    assert [(env["DPLAB_ENGINES"], env["DPLAB_BACKEND"], env["DPLAB_DEVICE"]) for env in settings.values()] == [
        ("1", "gloo", "cpu"), ("4", "gloo", "cpu")]


def test_gpu_settings_never_run_at_once():
    out = run("--gpu", "--parallel")
    assert out.returncode != 0 and "one after the other" in out.stderr


def test_one_after_another_each_verdict_is_logged_as_it_comes_and_the_limit_holds(tmp_path):
    """A run killed at its limit still says what ran: each verdict is in the log as the lab ends;
    past --timeout no cell runs, and the labs left say they were not started."""
    quick = tmp_path / "a_quick.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), quick)
    slow = tmp_path / "b_slow.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]), slow)
    after = tmp_path / "c_after.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), after)
    log = tmp_path / "log" / "gpu.log"
    before = descendants()
    t0 = time.monotonic()
    out = run("--timeout", "15", "--log", str(log), "--setting", "one:WHICH=1", "--setting", "two:WHICH=2",
              str(quick), str(slow), str(after))
    took = time.monotonic() - t0
    assert out.returncode == 1, out.stdout + out.stderr
    lines = log.read_text().splitlines()
    assert [line.split(": ok (")[0] for line in lines[:2]] == ["a_quick.ipynb [one]", "a_quick.ipynb [two]"], lines
    assert lines[2].startswith("b_slow.ipynb [one]: FAIL: not finished within the limit"), lines
    assert lines[3] == "b_slow.ipynb [two]: FAIL: not started within the 15 s limit", lines
    assert lines[5] == "c_after.ipynb [two]: FAIL: not started within the 15 s limit", lines
    assert lines[-1].endswith("2 passed, 4 failed"), lines
    assert took < 15 + 40, f"the limit did not hold: {took:.0f} s"
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def test_table_names_the_failing_cell_and_passes_the_setting(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import os\nassert os.environ['DPLAB_ENGINES'] == '3'"),
        nbformat.v4.new_code_cell("assert False, 'planted failure'"),
    ]
    path = tmp_path / "planted.ipynb"
    nbformat.write(nb, path)
    ok = tmp_path / "fine.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=nb.cells[:1]), ok)
    out = run("--setting", "p=3:DPLAB_ENGINES=3", str(ok), str(path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "fine.ipynb [p=3]: ok" in out.stdout
    assert "planted.ipynb [p=3]: FAIL cell 2: AssertionError: planted failure" in out.stdout
    assert out.stdout.rstrip().endswith("1 passed, 1 failed")


def test_badly_written_setting_is_refused():
    out = run("--setting", "p=3")
    assert out.returncode != 0 and "NAME:VAR=VALUE" in out.stderr


def test_parallel_settings_run_at_once_and_a_setting_past_the_limit_is_killed_whole(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '600'])  # a process the lab started\n"
        "time.sleep(600 if os.environ['WHICH'] == 'slow' else 0)\n"
        "child.kill()")]
    path = tmp_path / "sleepy.ipynb"
    nbformat.write(nb, path)
    before = descendants()
    t0 = time.monotonic()
    out = run("--parallel", "--timeout", "20", "--setting", "quick:WHICH=quick", "--setting", "slow:WHICH=slow",
              str(path))
    took = time.monotonic() - t0
    assert out.returncode == 1, out.stdout + out.stderr
    assert "sleepy.ipynb [quick]: ok" in out.stdout
    assert "sleepy.ipynb [slow]: FAIL: not finished within the 20 s limit" in out.stdout
    assert took < 20 + 15, f"the limit did not hold: {took:.0f} s"
    assert wait_until_gone(descendants() - before, timeout=5) == set()
    assert running_command(["sleep", "600"]) == [], "the slow setting's processes outlived it"


def test_parallel_settings_each_write_their_own_artifacts(tmp_path):
    """Settings run at once must not share labs/artifacts/: Lab 4 saves a checkpoint there and
    reads it back, and the GPU settings (make test-gpu) train different models."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import os, time\n"
        "os.makedirs('artifacts', exist_ok=True)\n"
        "open('artifacts/mine.txt', 'w').write(os.environ['WHICH'])\n"
        "time.sleep(3)  # the other setting writes meanwhile\n"
        "assert open('artifacts/mine.txt').read() == os.environ['WHICH'], 'overwritten'\n"
        "assert os.path.isfile('../chapters/ddp_train.py')  # what Lab 5 runs")]
    path = tmp_path / "labs" / "writer.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    out = run("--parallel", "--timeout", "120", "--setting", "a:WHICH=a", "--setting", "b:WHICH=b", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (path.parent / "artifacts").exists(), "a setting wrote beside the original lab"
