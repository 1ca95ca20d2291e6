"""DPLAB_* is read in one module (dplab/cluster/settings.py), as a field of Settings that is
passed on; no other module, lab cell or chapter cell reads one. Checked on a broken variant too."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from booktools.pages import ROOT, code_to_scan

SETTINGS_MODULE = "dplab/cluster/settings.py"
READERS = {"get", "getenv", "pop", "setdefault"}


def env_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) for every read of a DPLAB_* name: os.environ.get/pop/setdefault or
    environ[...], os.getenv(...), "DPLAB_X" in os.environ, and the same on any mapping (a copy
    of the environment). Writing one (env["DPLAB_X"] = ..., dict(..., DPLAB_X=...)) is no read.
    A name computed at run time (os.environ.get(name)) is not seen: keep names literal."""
    found = []

    def name(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("DPLAB_"):
            return node.value
        return None

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args:
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if called in READERS and name(node.args[0]):
                found.append((node.lineno, name(node.args[0])))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and name(node.slice):
            found.append((node.lineno, name(node.slice)))
        elif isinstance(node, ast.Compare) and name(node.left) and any(
                isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            found.append((node.lineno, name(node.left)))
    return found


def allowed(where: str, variable: str) -> bool:
    """Only the settings module reads DPLAB_*. (The hub samples read their own DPHUB_*, the
    hub's settings, which configure its spawner and never reach the kit: another prefix.)"""
    return where == SETTINGS_MODULE


def stray_reads(root: Path) -> list[str]:
    """'file:line: reads DPLAB_X' of every read of a DPLAB_* variable outside the settings module,
    in the Python of every page and module (booktools.pages.code_to_scan)."""
    found = []
    for where, first, source in code_to_scan(root):
        for line, variable in env_reads(source):
            if not allowed(where, variable):
                found.append(f"{where}:{first + line - 1}: reads {variable}")
    return found


def test_dplab_variables_are_read_in_the_settings_module_only():
    stray = stray_reads(ROOT)
    assert stray == [], ("DPLAB_* read outside dplab/cluster/settings.py (read it there, as a field of "
                         "Settings, and pass the settings on):\n" + "\n".join(stray))


def test_the_scan_finds_every_kind_of_read_and_no_write():
    reads = env_reads(
        "import os\nfrom os import environ, getenv\n"
        "a = os.environ.get('DPLAB_A')\n"
        "b = os.environ['DPLAB_B']\n"
        "c = getenv('DPLAB_C', '1')\n"
        "d = 'DPLAB_D' in os.environ\n"
        "env = dict(os.environ)\ne = env.get('DPLAB_E') or environ.pop('DPLAB_F')\n"
        "os.environ['DPLAB_W'] = '1'\nos.environ.update(DPLAB_X='2')\nchild = dict(env, DPLAB_Y='3')\n"
        "writes = {'DPLAB_Z': '4'}\n")
    assert sorted(reads) == [(3, "DPLAB_A"), (4, "DPLAB_B"), (5, "DPLAB_C"), (6, "DPLAB_D"), (8, "DPLAB_E"),
                             (8, "DPLAB_F")]


def test_a_stray_read_is_named_by_file_and_line(tmp_path):
    """The broken variant: data.py reading DPLAB_MNIST itself, as it did, and a lab cell and a
    chapter cell doing the same; the hub sample may read its own DPHUB_* but nothing else."""
    files = {
        "dplab/data.py": "import os\n\nroot = os.environ.get('DPLAB_MNIST')\n",
        "dplab/cluster/settings.py": "import os\nos.environ.get('DPLAB_ENGINES')\n",
        "hub/jupyterhub_config.py": "def f(env):\n    return env.get('DPHUB_MODE'), env['DPLAB_ENGINES']\n",
        "chapters/x.md": "text\n\n```{code-cell} ipython3\n:tags: [hide-input]\nimport os\n"
                         "p = os.environ['DPLAB_ENGINES']\n```\n",
        "labs/00_x.ipynb": json.dumps({"cells": [
            {"cell_type": "markdown", "source": ["os.environ['DPLAB_NOT_CODE']"]},
            {"cell_type": "code", "source": ["%%px\n", "import os\n", "n = os.getenv('DPLAB_ENGINES')\n"]}]}),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert stray_reads(tmp_path) == [
        "dplab/data.py:3: reads DPLAB_MNIST",
        "hub/jupyterhub_config.py:2: reads DPLAB_ENGINES",
        "labs/00_x.ipynb (cell 1):3: reads DPLAB_ENGINES",
        "chapters/x.md:6: reads DPLAB_ENGINES",
    ]
