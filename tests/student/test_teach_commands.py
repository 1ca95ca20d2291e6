"""Instructor mode is the installed package teach, run as `python -m teach.X`: the old commands
in tools/ still run it, and the nbgrader course that teach.course writes finds the handout step
as an installed module (no sys.path edit) and bounds autograde's cells by the book's rule."""
import subprocess
import sys

import pytest

from booktools.labs import lab
from booktools.notebooks import CELL_TIMEOUT_S
from booktools.pages import ROOT
from teach import course

COMMANDS = ["student", "course", "grade", "grade_class", "sandbox"]


@pytest.mark.parametrize("name", COMMANDS)
def test_each_old_command_in_tools_runs_its_teach_module(name):
    def usage(*command: str) -> str:
        done = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert usage(f"tools/{name}.py") == usage("-m", f"teach.{name}").replace("__main__.py", f"{name}.py")


def test_the_course_finds_the_handout_step_installed_and_copies_what_each_lab_reads(tmp_path):
    from nbgrader.preprocessors import ClearSolutions
    from traitlets.config.loader import PyFileConfigLoader

    from teach.handout import Handout

    chosen = [lab("00"), lab("05")]
    assert course.make_course(tmp_path, chosen) == [each.stem for each in chosen]
    text = (tmp_path / "nbgrader_config.py").read_text()
    assert "sys.path" not in text
    config = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    steps = config.GenerateAssignment.preprocessors
    assert steps[steps.index(ClearSolutions) + 1] is Handout
    assert config.Execute.timeout == CELL_TIMEOUT_S
    assert chosen[1].reads, "Lab 5 reads the book's training script"
    for each in chosen:
        beside = sorted(p.name for p in (tmp_path / "source" / each.stem).iterdir())
        assert beside == sorted([each.name, *(r.split("/")[-1] for r in each.reads)])
