"""booktools.conditions: each condition parses, combines with others, refuses what it must before
anything starts, and nothing it starts outlives the runner, even killed with SIGKILL."""
import os
import signal
import subprocess
import sys

import psutil
import pytest

from booktools import conditions, gpu
from booktools.conditions import Refused, parse, passes
from dplab.cluster.settings import DEFAULT_ENGINES, max_engines
from tests.support.processes import outlived_sigkill

H100 = [{"name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "compute_mode": "Default"}]


@pytest.mark.parametrize("spelling, kind, env", [
    ("p=3", "p", {"DPLAB_ENGINES": "3"}),
    ("other-cpu", "other-cpu", {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                "OMP_NUM_THREADS": "1", "DPLAB_THREADS": "2"}),
    ("busy", "busy", {}),
    ("two", "two", {}),
    ("two=3", "two", {}),
    ("gpu", "gpu", {}),
    ("quiet", "quiet", {}),
])
def test_each_condition_parses_from_its_spelling_and_says_what_it_sets(spelling, kind, env):
    (found,) = parse(spelling).conditions
    assert (found.kind, found.spelling, found.environment()) == (kind, spelling, env)


def test_a_second_learner_on_its_own_release_puts_that_release_first_on_its_own_pythonpath(monkeypatch):
    """two=3@X: the pass keeps its torch, the second learner gets release X (CI's lowest release
    rides on the newest release's pass this way)."""
    from booktools.releases import RELEASES

    (torch, two) = parse("torch=2.15.0,two=3@2.12.1").conditions
    assert (two.engines, two.torch, two.spelling) == (3, "2.12.1", "two=3@2.12.1")
    started = {}

    class Fake:
        def __init__(self, labs, settings, env, limit, say):
            started.update(env)

        def wait(self, timeout=None):
            return []

    monkeypatch.setattr("booktools.learners.Learner", Fake)
    with two.beside([], {**torch.environment(), "DPLAB_DEVICE": "cpu"}, "pass", lambda line: None):
        pass
    assert started["PYTHONPATH"].split(os.pathsep)[0] == str(RELEASES / "2.12.1")
    assert started["DPLAB_ENGINES"] == "3" and torch.environment()["PYTHONPATH"].startswith(str(RELEASES / "2.15.0"))


def test_a_torch_release_goes_first_on_pythonpath(monkeypatch):
    from booktools.releases import RELEASES

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    (release,) = parse("torch=2.8.0").conditions
    assert release.environment() == {"PYTHONPATH": f"{RELEASES / '2.8.0'}{os.pathsep}/elsewhere"}


def test_the_venvs_own_release_is_used_as_it_is_and_nothing_installed(monkeypatch):
    """torch=2.13.0 where the venv holds 2.13.0+cpu: no folder on PYTHONPATH, no install (the
    sweep does not fetch the pinned release again); another release still goes first."""
    from importlib.metadata import version

    from booktools import releases

    ours = version("torch").split("+")[0]
    (same,) = parse(f"torch={ours}").conditions
    said = []
    monkeypatch.setattr(releases, "install", lambda *a, **k: pytest.fail("installed the venv's own torch"))
    same.check()
    same.set_up(said.append)
    assert same.environment() == {} and said == [f"torch={ours}: the venv's own torch, nothing installed"]
    other = "2.8.0" if ours != "2.8.0" else "2.15.0"
    assert parse(f"torch={other}").conditions[0].environment()["PYTHONPATH"].startswith(
        str(releases.RELEASES / other))


def test_conditions_combine_with_commas_and_passes_with_spaces():
    from booktools.releases import RELEASES

    found = passes("torch=2.8.0,other-cpu,busy p=1 p=3".split())
    assert [p.spelling for p in found] == ["torch=2.8.0,other-cpu,busy", "p=1", "p=3"]
    env = found[0].environment()
    assert env["MKL_CBWR"] == "COMPATIBLE" and env["PYTHONPATH"].startswith(str(RELEASES / "2.8.0"))
    assert parse("gpu,offline").spelling == "gpu,offline"
    assert parse("two=3,p=2").environment() == {"DPLAB_ENGINES": "2"}  # the learner's own p is beside


def test_only_what_keeps_the_stored_outputs_comparable_runs_nbval():
    comparable = {spec: parse(spec).comparable for spec in
                  [f"p={DEFAULT_ENGINES}", "p=3", "other-cpu,busy", "torch=2.8.0,two=3", "quiet", "gpu", "gpu,offline"]}
    assert comparable == {f"p={DEFAULT_ENGINES}": True, "p=3": False, "other-cpu,busy": True,
                          "torch=2.8.0,two=3": True, "quiet": True, "gpu": False, "gpu,offline": False}


@pytest.mark.parametrize("spec, says", [
    ("fast", "unknown condition 'fast'"),
    ("labs/04_ddp.ipynb", "name the notebooks apart from --on's passes"),
    ("busy=3", "busy takes no value"),
    ("p", "name the engine count"),
    ("p=0", "p=0: engine count"),
    ("p=three", "p=three: engine count"),
    (f"p={max_engines() + 1}", "engine count"),
    ("two=0", "two=0: engine count"),
    ("p=3,p=2", "p given twice"),
    ("two,two=3", "two given twice"),
    ("gpu,other-cpu", "gpu sets its own engine and thread counts"),
    ("gpu,p=2", "gpu sets its own engine and thread counts"),
    ("offline", "offline goes with gpu"),
    ("quiet,busy", "quiet is a plain run"),
    ("torch=abc", "not a release number"),
    ("torch=2.7.1", "older than the book supports"),
    ("two=3@2.7.1", "older than the book supports"),
    ("two=3@latest", "not a release number"),
    (",", "an empty pass"),
])
def test_unknown_or_contradictory_conditions_are_refused_naming_the_known_ones(spec, says):
    with pytest.raises(Refused) as refused:
        parse(spec)
    assert says in str(refused.value), refused.value
    if "unknown" in says or "no value" in says:
        assert conditions.KNOWN in str(refused.value)


def test_gpu_settings_never_run_at_once():
    # at once, GPU 0 carried NCCL's rank 0 and every gloo engine: rank 0 became a straggler
    with pytest.raises(Refused, match="one after the other"):
        parse("gpu,two")


def test_a_cpu_build_of_torch_on_a_gpu_machine_is_named_with_the_fix():
    said = gpu.gpu_problem("2.13.0+cpu", None, 0, H100)
    assert "CPU build" in said and "--force-reinstall torch==2.13.0 " in said and "570.86.15" in said
    assert "no GPU is visible" in gpu.gpu_problem("2.13.0+cpu", None, 0, [])
    assert gpu.gpu_problem("2.13.0+cu128", "12.8", 1, H100) is None


def test_gpu_settings_share_the_cores_among_the_engines_and_the_kernel(monkeypatch):
    """On 16 cores with one GPU: the NCCL engine 8 threads and the kernel 8; then 4 gloo engines
    3 each and the kernel 3. Not 16 for the kernel on top of the engines' (Lab 2: 130 s on an H200)."""
    import torch

    monkeypatch.setattr(gpu, "nvidia_gpus", lambda: H100)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: H100[0]["name"])
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    said = []
    settings = dict(parse("gpu").conditions[0].settings(said.append))
    threads = [(env["DPLAB_ENGINES"], env["DPLAB_THREADS"], env["OMP_NUM_THREADS"]) for env in settings.values()]
    assert threads == [("1", "8", "8"), ("4", "3", "3")], settings
    assert settings[gpu.SHARED_GPU]["CUDA_VISIBLE_DEVICES"] == "0"
    assert any("3 torch thread(s) per engine, 3 for the kernel, on 16 cores" in line for line in said), said
    assert gpu.thread_split(1, 2) == (1, 1) and gpu.thread_split(4, 2) == (1, 1)


def test_gpu_rehearsal_keeps_the_settings_shape_on_the_cpu():
    (rehearsal,) = parse("gpu").rehearsed().conditions
    rehearsal.check()  # no GPU needed
    settings = rehearsal.settings(lambda line: None)
    assert [(env["DPLAB_ENGINES"], env["DPLAB_BACKEND"], env["DPLAB_DEVICE"]) for _, env in settings] == [
        ("1", "gloo", "cpu"), ("4", "gloo", "cpu")]


def test_gpu_without_a_gpu_is_refused_at_the_check(monkeypatch):
    monkeypatch.setattr(gpu, "problem_here", lambda: "gpu: no GPU is visible to torch; nothing was started")
    with pytest.raises(Refused, match="no GPU is visible"):
        parse("gpu").conditions[0].check()


# -- nothing outlives the runner ----------------------------------------------------------------

BESIDE = """
import sys, time
import booktools.children
if sys.argv[1] == "broken":
    booktools.children.tied = lambda sig: None  # the busy core no longer tied to its parent
from booktools.conditions import parse
with parse("busy").conditions[0].beside([], {}, "test", lambda line: None):
    time.sleep(60)
"""


def outlives_sigkill(script: str, mode: str, marker: str) -> bool:
    """Whether the process whose command line holds `marker`, started (at any depth) by a parent
    running `script`, is still running 2 s after that parent was killed with SIGKILL (it is then
    killed)."""
    parent = subprocess.Popen([sys.executable, "-c", script, mode])
    started: list[int] = []

    def up() -> bool:
        started[:] = [c.pid for c in psutil.Process(parent.pid).children(recursive=True)
                      if marker in " ".join(c.cmdline())]
        return bool(started)
    return bool(outlived_sigkill(parent, up, f"a process with {marker!r}", gone_s=2) & set(started))


def test_the_busy_core_dies_with_its_runner_even_by_sigkill():
    assert not outlives_sigkill(BESIDE, "tied", "sum(range")
    assert outlives_sigkill(BESIDE, "broken", "sum(range")  # untied, it outlives the runner


TREE = """
import subprocess, sys, time
from booktools.children import start_tree
cmd = [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '305']); time.sleep(60)"]
child = start_tree(cmd) if sys.argv[1] == "tethered" else subprocess.Popen(cmd)
time.sleep(60)
"""


def test_a_tethered_command_and_all_it_started_die_with_the_runner_even_by_sigkill():
    assert not outlives_sigkill(TREE, "tethered", "sleep 305")
    assert outlives_sigkill(TREE, "untethered", "sleep 305")  # without the tether, its children outlive it


# .ci/run's way: a shell starts the tether in the background (its install of torch releases)
SHELL_TREE = """
if [[ $1 == tethered ]]; then tether=("{python}" -m booktools.children); else tether=(); fi
"${tether[@]}" bash -c 'sleep 306 & wait' &
sleep 60
"""


def test_a_command_a_shell_tethers_in_the_background_dies_with_the_shell_even_by_sigkill():
    script = SHELL_TREE.replace("{python}", sys.executable)
    for mode, outlives in (("tethered", False), ("untethered", True)):  # untethered, the sleep outlives it
        parent = subprocess.Popen(["bash", "-c", script, "bash", mode])
        alive = outlived_sigkill(parent, lambda: any(
            c.cmdline() == ["sleep", "306"] for c in psutil.Process(parent.pid).children(recursive=True)),
            "the shell's sleep")
        assert bool(alive) == outlives, (mode, alive)


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
    # what booktools.children ties the busy core and the tether with
    assert not orphan_after_sigkill("armed")
    assert orphan_after_sigkill("unarmed")  # without it, the child outlives its parent
