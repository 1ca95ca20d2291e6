"""What each make target needs: the lab runs that build no page must not need npm (a GPU node may
have none), while the book does. `make -n` with a venv that does not exist lists every recipe
a fresh machine would run, without running any."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def dry_run(target: str, tmp_path) -> str:
    out = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'fresh-venv'}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("target", ["test-gpu", "test-any-p", "student", "grade", "test-student"])
def test_lab_runs_need_only_the_python_venv(target, tmp_path):
    recipe = dry_run(target, tmp_path)
    assert "pip install" in recipe, "the dry run should set up the venv first"
    assert "npm" not in recipe, f"make {target} would need npm (MathJax), which a GPU node may lack"


def test_the_book_still_installs_mathjax(tmp_path):
    assert "npm install" in dry_run("book", tmp_path)


@pytest.mark.parametrize("target", ["test-labs", "test-labs-other-cpu"])
def test_nbval_passes_run_on_the_cpu_whatever_the_machine_has(target, tmp_path):
    nbval = next(line for line in dry_run(target, tmp_path).splitlines() if "--nbval" in line)
    assert "DPLAB_DEVICE=cpu" in nbval, "on a GPU machine the labs would pick CUDA and print other outputs"


@pytest.mark.parametrize("target", ["student", "test-student", "test-nbgrader", "test-slurm"])
def test_targets_that_grade_install_nbgrader_on_a_fresh_machine(target, tmp_path):
    # test-slurm grades a class (tests/slurm/test_grade_class.py). A prerequisite named by a
    # variable defined below its rule expands to nothing, and CI failed for want of nbgrader.
    assert "requirements-teach.txt" in dry_run(target, tmp_path)
