"""tools/export_labs.py: labcode/ is the labs' own code, and the export refuses what would not run."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import export_labs  # noqa: E402


def test_labcode_is_what_the_labs_export():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "export_labs.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def write_lab(folder: Path, *cells: tuple[str, str]) -> None:
    """A minimal notebook of (cell_type, source) cells in folder/01_t.ipynb."""
    nb = {"cells": [{"cell_type": t, "source": src, "metadata": {}, **({"outputs": [], "execution_count": None}
                                                                       if t == "code" else {})}
                    for t, src in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "01_t.ipynb").write_text(json.dumps(nb))


def test_export_takes_definitions_and_their_imports_but_nothing_that_runs(tmp_path):
    write_lab(tmp_path, ("code", "import math\nimport numpy as np"),
              ("markdown", "## Steps\n\n**Halve it.** text"),
              ("code", "%%px\n#| export: demo\nSCALE = 2\ndef halve(x):\n    return np.asarray(x) / SCALE\n"
                       "print(halve(4))"),
              ("code", "def not_exported():\n    pass"))
    files = export_labs.render(export_labs.collect(sorted(tmp_path.glob("*.ipynb"))))
    text = files["demo.py"]
    assert "import numpy as np" in text and "import math" not in text
    assert 'section "Steps", "Halve it"' in text
    assert "print(" not in text and "not_exported" not in text
    namespace = {}
    exec(text, namespace)
    assert namespace["halve"](4) == 2 and np.isclose(namespace["halve"](3), 1.5)


def test_export_refuses_code_that_uses_an_engine_global(tmp_path):
    write_lab(tmp_path, ("code", "%%px\n#| export: demo\ndef mine(x):\n    return x[rank]"))
    with pytest.raises(export_labs.ExportError, match=r"01_t.ipynb cell 0 .* uses rank"):
        export_labs.collect(sorted(tmp_path.glob("*.ipynb")))


def test_export_refuses_constants_assigned_together_instead_of_skipping_them(tmp_path):
    write_lab(tmp_path, ("code", "#| export: demo\nA, B = 1, 2\ndef one():\n    return A"))
    with pytest.raises(export_labs.ExportError, match=r"cell 0 assigns A, B in one statement.*one assignment per line"):
        export_labs.collect(sorted(tmp_path.glob("*.ipynb")))


def test_check_fails_when_labcode_was_edited_by_hand(tmp_path):
    write_lab(tmp_path, ("code", "#| export: demo\ndef one():\n    return 1"))
    out = tmp_path / "pkg"
    assert export_labs.main(["--labs", str(tmp_path), "--out", str(out)]) == 0
    assert export_labs.main(["--labs", str(tmp_path), "--out", str(out), "--check"]) == 0
    (out / "demo.py").write_text((out / "demo.py").read_text().replace("return 1", "return 2"))
    assert export_labs.main(["--labs", str(tmp_path), "--out", str(out), "--check"]) == 1
