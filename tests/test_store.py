"""booktools.store (make labs): a lab re-executed in place keeps its new outputs and its wall time;
one whose cell fails is not written."""
import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from booktools.store import store
from tests.support import make

ROOT = Path(__file__).resolve().parent.parent


def test_store_writes_the_outputs_and_the_labs_wall_time(tmp_path):
    lab = tmp_path / "00_tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('stored')")]), lab)
    times = tmp_path / "lab_times.json"
    assert store(lab, times).startswith("ok (")
    outputs = nbformat.read(lab, as_version=4).cells[0].outputs
    assert [o.get("text") for o in outputs] == ["stored\n"], outputs
    record = json.loads(times.read_text())
    assert set(record["labs"]) == {"00_tiny"} and "core" in record["machine"], record


def test_store_refuses_a_lab_whose_cell_fails_and_writes_nothing(tmp_path):
    lab = tmp_path / "00_broken.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert 1 + 1 == 3, 'broken'")]), lab)
    before = lab.read_bytes()
    times = tmp_path / "lab_times.json"
    with pytest.raises(SystemExit, match="code cell 1: AssertionError: broken; its outputs were not stored"):
        store(lab, times)
    assert lab.read_bytes() == before and not times.exists()


def test_make_labs_stores_through_booktools_store(tmp_path):
    out = make.run("-n", "labs", f"VENV={tmp_path / 'fresh-venv'}")
    assert out.returncode == 0 and "-m booktools.store labs/*.ipynb" in out.stdout, out.stdout + out.stderr
