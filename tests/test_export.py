"""booktools.export: labcode/ is the labs' and chapters' own code, and the export refuses
what would not run."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from booktools import export
from booktools.pages import ROOT


def test_labcode_is_what_the_labs_export():
    out = subprocess.run([sys.executable, "-m", "booktools.export", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def write_lab(folder: Path, *cells: tuple) -> None:
    """A minimal notebook of (cell_type, source) or (cell_type, source, tags) cells in
    folder/01_t.ipynb."""
    nb = {"cells": [{"cell_type": t, "source": src, "metadata": {"tags": list(tags[0])} if tags else {},
                     **({"outputs": [], "execution_count": None} if t == "code" else {})}
                    for t, src, *tags in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "01_t.ipynb").write_text(json.dumps(nb))


def test_export_takes_definitions_and_their_imports_but_nothing_that_runs(tmp_path):
    write_lab(tmp_path, ("code", "import math\nimport numpy as np"),
              ("markdown", "## Steps\n\n**Halve it.** text"),
              ("code", "%%px\nSCALE = 2\ndef halve(x):\n    return np.asarray(x) / SCALE\n"
                       "print(halve(4))", ["export-demo"]),
              ("code", "def not_exported():\n    pass"))
    files = export.render(export.collect(sorted(tmp_path.glob("*.ipynb"))))
    text = files["demo.py"]
    assert "import numpy as np" in text and "import math" not in text
    assert 'section "Steps", "Halve it"' in text
    assert "print(" not in text and "not_exported" not in text
    namespace = {}
    exec(text, namespace)
    assert namespace["halve"](4) == 2 and np.isclose(namespace["halve"](3), 1.5)


def test_export_refuses_code_that_uses_an_engine_global(tmp_path):
    write_lab(tmp_path, ("code", "%%px\ndef mine(x):\n    return x[rank]", ["export-demo"]))
    with pytest.raises(export.ExportError, match=r"01_t.ipynb cell 0 .* uses rank"):
        export.collect(sorted(tmp_path.glob("*.ipynb")))


def test_a_module_imports_what_another_module_exported_earlier(tmp_path):
    """A lab may export its algorithm and the tools that measure it into two modules; a name the
    second uses from the first is imported from it, and a name exported only later is refused."""
    write_lab(tmp_path, ("code", "def double(x):\n    return 2 * x", ["export-algo"]),
              ("code", "def timed(x):\n    return double(x), later(x)", ["export-measure"]),
              ("code", "def later(x):\n    return x", ["export-algo"]))
    with pytest.raises(export.ExportError, match=r"cell 1 exports code that uses later"):
        export.collect(sorted(tmp_path.glob("*.ipynb")))
    write_lab(tmp_path, ("code", "def double(x):\n    return 2 * x", ["export-algo"]),
              ("code", "def timed(x):\n    return double(x)", ["export-measure"]))
    files = export.render(export.collect(sorted(tmp_path.glob("*.ipynb"))))
    assert "from labcode.algo import double" in files["measure.py"]
    assert "import" not in files["algo.py"].split('"""')[2]


def test_export_refuses_constants_assigned_together_instead_of_skipping_them(tmp_path):
    write_lab(tmp_path, ("code", "A, B = 1, 2\ndef one():\n    return A", ["export-demo"]))
    with pytest.raises(export.ExportError, match=r"cell 0 assigns A, B in one statement.*one assignment per line"):
        export.collect(sorted(tmp_path.glob("*.ipynb")))


def test_the_old_marker_line_the_reader_saw_is_refused_and_a_cell_exports_into_one_module(tmp_path):
    """Before, a cell was marked with a first line '#| export: MODULE', which every reader saw
    (issue 60): now a tag. The old line is refused, saying what to do; two modules' tags too."""
    write_lab(tmp_path, ("code", "%%px\n#| export: demo\ndef one():\n    return 1"))
    with pytest.raises(export.ExportError, match=r"cell 0 marks its export with a first line '#\| export: demo'"
                                                 r".*give the cell the tag export-demo"):
        export.collect(sorted(tmp_path.glob("*.ipynb")))
    write_lab(tmp_path, ("code", "def one():\n    return 1", ["export-a", "hide-input", "export-b"]))
    with pytest.raises(export.ExportError, match=r"cell 0 has the tags of 2 modules \(a, b\)"):
        export.collect(sorted(tmp_path.glob("*.ipynb")))


def test_no_page_shows_an_export_marker():
    """Every exported cell of the book carries its module as a tag, none as a line of its code."""
    from booktools.pages import toc

    shown = [cell.where for page in toc() for cell in export.read_page(page.path) if cell.kind == "code"
             and export.OLD_MARKER.match(cell.source.lstrip("\n").split("\n", 1)[0])]
    assert shown == []  # read as the exporter reads a cell: without magics (%%px --targets 0:2)
    tagged = sum(any(export.TAG.match(t) for t in cell.tags) for page in toc() for cell in page.code_cells)
    assert tagged > 50, tagged


def test_check_fails_when_labcode_was_edited_by_hand(tmp_path):
    write_lab(tmp_path, ("code", "def one():\n    return 1", ["export-demo"]))
    out = tmp_path / "pkg"
    args = ["--labs", str(tmp_path), "--chapters", str(tmp_path), "--out", str(out)]
    assert export.main(args) == 0
    assert export.main(args + ["--check"]) == 0
    (out / "demo.py").write_text((out / "demo.py").read_text().replace("return 1", "return 2"))
    assert export.main(args + ["--check"]) == 1


CHAPTER = """---
kernelspec:
  name: python3
---

(ch-t)=
# A chapter

```{code-cell} ipython3
:tags: [remove-cell]
import math

import numpy as np
from myst_nb import glue

data = np.arange(4.0)
```

(sec-halving)=
## Halving

**Halve it.** The formula is $x / 2$:

$$
h(x) = x / 2
$$

```{code-block} python
# not a heading: a comment in a code block
```

```{code-cell} ipython3
:tags: [hide-input, export-demo]
:mystnb:
:  code_prompt_show: "Show the code"
# also not a heading: a comment in the cell
SCALE = 2


def halve(x: float) -> float:
    \"\"\"x / SCALE.\"\"\"
    return np.asarray(x) / SCALE


print(halve(data))
```

```{code-block} python
#| export: demo
def shown_only():
    pass
```

```{code-cell} ipython3
def not_exported():
    pass
```
"""


def write_chapter(folder: Path, text: str = CHAPTER) -> Path:
    """A MyST chapter, folder/t.md."""
    (folder / "t.md").write_text(text)
    return folder / "t.md"


def test_chapter_cells_export_their_definitions_with_the_chapter_and_section(tmp_path):
    files = export.render(export.collect([], [write_chapter(tmp_path)]))
    text = files["demo.py"]
    assert f"Generated from chapters/t.md by {export.TOOL}" in text
    assert "Change the chapter, then run" in text
    assert '# From chapters/t.md, section "Halving", "Halve it".\nSCALE = 2' in text
    assert '# From chapters/t.md, section "Halving", "Halve it".\ndef halve' in text
    assert "import numpy as np" in text and "import math" not in text and "glue" not in text
    assert "print(" not in text and "not_exported" not in text and "shown_only" not in text
    assert "- `labcode.demo`: from chapters/t.md" in files["__init__.py"]
    namespace = {}
    exec(text, namespace)
    assert namespace["halve"](3) == 1.5


def test_chapter_export_refuses_a_name_the_page_merely_holds(tmp_path):
    uses_data = CHAPTER.replace("return np.asarray(x) / SCALE", "return data[x] / SCALE")
    line = uses_data.splitlines().index("# also not a heading: a comment in the cell") + 1
    with pytest.raises(export.ExportError, match=rf"t.md line {line} .* uses data, .*argument"):
        export.collect([], [write_chapter(tmp_path, uses_data)])


def test_check_fails_when_labcode_differs_from_a_chapter(tmp_path):
    chapter, out = write_chapter(tmp_path), tmp_path / "pkg"
    args = ["--labs", str(tmp_path), "--chapters", str(tmp_path), "--out", str(out)]
    assert export.main(args) == 0
    assert export.main(args + ["--check"]) == 0
    chapter.write_text(CHAPTER.replace("SCALE = 2", "SCALE = 3"))
    assert export.main(args + ["--check"]) == 1
    assert export.main(args) == 0 and "SCALE = 3" in (out / "demo.py").read_text()
    chapter.write_text(CHAPTER.replace(":tags: [hide-input, export-demo]", ":tags: [hide-input]"))
    assert export.main(args + ["--check"]) == 1  # labcode/demo.py is now stale


def test_a_module_takes_labs_and_chapters_in_the_books_order():
    pages = ["labs/04_ddp.ipynb", "chapters/ddp_inside.md", "chapters/ddp.md",
             "labs/03_allreduce_algorithms.ipynb", "chapters/zz_not_in_the_toc.md",
             "chapters/allreduce_algorithms.md"]
    assert export.book_order(pages) == [
        "chapters/allreduce_algorithms.md", "labs/03_allreduce_algorithms.ipynb",
        "chapters/ddp.md", "chapters/ddp_inside.md", "labs/04_ddp.ipynb",
        "chapters/zz_not_in_the_toc.md"]


def labcode_imports(folder: Path) -> list[str]:
    """Each `file: import` of labcode in the Python files under folder."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(folder)}: {n}" for n in names
                      if n == "labcode" or n.startswith("labcode.")]
    return found


def test_the_kit_imports_nothing_from_labcode(tmp_path):
    # labcode (the pages' code) may use the kit; the kit using labcode would make each
    # package depend on the other.
    assert labcode_imports(ROOT / "dplab") == []
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "bad.py").write_text("import os\nfrom labcode.costmodel import cost\n")
    assert labcode_imports(tmp_path / "kit") == ["bad.py: labcode.costmodel"]
