"""What each make target needs: the lab runs that build no page must not need npm (a GPU node may
have none), while the book does. `make -n` with a venv that does not exist lists every recipe
a fresh machine would run, without running any."""
import subprocess
from pathlib import Path

import pytest

from booktools.run import ANY_P
from tests.support import make

ROOT = Path(__file__).resolve().parent.parent


def dry_run(target: str, tmp_path) -> str:
    return dry_run_with(target, [], tmp_path)


def dry_run_with(target: str, args: list[str], tmp_path) -> str:
    out = make.run("-n", target, *args, f"VENV={tmp_path / 'fresh-venv'}")
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("target", ["test-gpu", "test-any-p", "student", "grade", "test-student"])
def test_lab_runs_need_only_the_python_venv(target, tmp_path):
    recipe = dry_run(target, tmp_path)
    assert "pip install" in recipe, "the dry run should set up the venv first"
    assert "npm" not in recipe, f"make {target} would need npm (MathJax), which a GPU node may lack"


def test_the_book_still_installs_mathjax(tmp_path):
    assert "npm install" in dry_run("book", tmp_path)


@pytest.mark.parametrize("target, on", [("test-labs", "quiet"), ("test-labs-other-cpu", "other-cpu,busy")])
def test_nbval_passes_run_on_the_cpu_whatever_the_machine_has(target, on, tmp_path, capsys, monkeypatch):
    from booktools.run import main

    assert f'-m booktools.run --on "{on}" ' in dry_run(target, tmp_path)
    monkeypatch.setenv("DPLAB_DEVICE", "cuda")
    assert main(["--plan", "--on", on, "--labs", "00"]) == 0
    plan = capsys.readouterr().out
    assert "nbval over" in plan and "DPLAB_DEVICE=cpu" in plan, \
        "on a GPU machine the labs would pick CUDA and print other outputs"


@pytest.mark.parametrize("target, args, on", [
    ("test-labs-other-cpu", [], 'other-cpu,busy"'),
    ("test-any-p", [], f'{ANY_P}"'),  # the passes the intro page names
    ("test-any-p", ["ANY_P=2 5"], 'p=2 p=5"'),
    ("test-load", [], 'quiet quiet quiet busy two p=2 p=6" --labs timing'),
    ("test-load", ["LOAD=quiet1 two"], 'quiet two" --labs timing'),
    ("test-gpu", [], 'gpu" --timeout 480 --log _build/test_gpu.log'),
    ("test-torch", ["TORCH=2.8.0", "ON=other-cpu", "RECORD=1"],
     'torch=2.8.0,other-cpu,busy" --log _build/test-torch-2.8.0-other-cpu.log --record benchmarks/results/test_torch.txt'),
])
def test_the_old_targets_are_passes_of_test_labs(target, args, on, tmp_path):
    recipe = dry_run_with(target, args, tmp_path)
    assert "test-labs ON=" in recipe, f"make {target} is no longer an alias of make test-labs"
    assert f'-m booktools.run --on "{on}' in " ".join(recipe.split()), recipe


def test_test_gpu_offline_needs_no_venv(tmp_path):
    out = dry_run_with("test-gpu", ["OFFLINE=1"], tmp_path)
    assert "bash tools/gpu_offline/run.sh" in out and "LIMIT=480" in out
    assert "pip install" not in out and "-m venv" not in out, "a GPU machine with no network has no venv"


@pytest.mark.parametrize("target", ["student", "test-student", "test-nbgrader", "test-slurm"])
def test_targets_that_grade_install_nbgrader_on_a_fresh_machine(target, tmp_path):
    # test-slurm grades a class (tests/slurm/test_grade_class.py). A prerequisite named by a
    # variable defined below its rule expands to nothing, and CI failed for want of nbgrader.
    assert "requirements-teach.txt" in dry_run(target, tmp_path)


def test_a_make_that_runs_the_tests_hands_its_conditions_to_none_of_their_makes(tmp_path):
    """.ci/run's make test ON=... exports ON to its recipes and passes it on in MAKEFLAGS: the
    tests' own makes read the Makefile's default all the same (tests.support.make)."""
    import os

    parent = {**os.environ, "ON": "torch=2.15.0,two=3", "MAKEFLAGS": " -- ON=torch=2.15.0,two=3",
              "MAKELEVEL": "1"}
    raw = subprocess.run(["make", "-n", "test-labs", f"VENV={tmp_path / 'fresh-venv'}"], cwd=ROOT,
                         env=parent, capture_output=True, text=True, timeout=60)
    assert '--on "torch=2.15.0,two=3"' in raw.stdout, "the parent's ON no longer reaches a plain make"
    clean = make.run("-n", "test-labs", f"VENV={tmp_path / 'fresh-venv'}", env=parent)
    assert '-m booktools.run --on "quiet" ' in clean.stdout, clean.stdout + clean.stderr
