"""Reading order: a page uses only the labcode that earlier pages wrote (d2l's forward-only
order), with no exception (issue 60 emptied the list of previews: a chapter that needs a later
lab's numbers states the formula or draws the figure). Checked on a broken variant too."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from booktools.pages import ROOT, as_python, toc


def labcode_writers(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(module, name) -> the page whose exported cell defines it, read from labcode/'s
    '# From <page>' comments."""
    writers = {}
    for path in sorted((root / "labcode").glob("*.py")):
        text = path.read_text()
        page, origin = None, {}
        for number, line in enumerate(text.split("\n"), 1):
            m = re.match(r"# From (\S+)\.(?:ipynb|md),", line)
            page = m.group(1) if m else page
            origin[number] = page
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            else:
                continue
            for name in names:
                if origin.get(node.lineno):
                    writers.setdefault((path.stem, name), origin[node.lineno])
    return writers


def labcode_uses(root: Path = ROOT) -> dict[str, set[tuple[str, str, str]]]:
    """page -> (module, name, where) for every labcode name the page's code cells use."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for page in toc(root):
        aliases = {}  # a page's kernel keeps an alias from the cell that imports it on
        for cell in page.code_cells:
            tree = ast.parse(as_python(cell.source))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labcode"):
                    for a in node.names:
                        if node.module == "labcode":
                            aliases[a.asname or a.name] = a.name
                        else:
                            found.setdefault(page.name, set()).add((node.module.split(".")[1], a.name, cell.where))
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.startswith("labcode."):
                            aliases[a.asname or a.name] = a.name.split(".")[1]
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id in aliases:
                    found.setdefault(page.name, set()).add((aliases[node.value.id], node.attr, cell.where))
    return found


def reading_order_breaks(root: Path = ROOT) -> list[str]:
    """Every use of a labcode name that no page, or a later page, writes."""
    order = [page.name for page in toc(root)]
    position = {page: i for i, page in enumerate(order)}
    writers, uses = labcode_writers(root), labcode_uses(root)
    breaks = []
    for page in order:
        for module, name, where in sorted(uses.get(page, ())):
            writer = writers.get((module, name))
            if writer is None:
                breaks.append(f"{page} {where}: labcode.{module}.{name} is written by no page")
            elif position[writer] > position[page]:
                breaks.append(f"{page} {where}: labcode.{module}.{name} comes from {writer}, "
                              "later in _toc.yml")
    return breaks


def test_a_page_uses_only_labcode_that_earlier_pages_wrote():
    breaks = reading_order_breaks()
    assert breaks == [], "\n".join(breaks)


def lab_one_in_a_copy(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the book's pages under tmp_path: Lab 1's path and its notebook, to break."""
    import shutil

    for part in ("chapters", "labs", "labcode"):
        shutil.copytree(ROOT / part, tmp_path / part)
    for name in ("_toc.yml", "intro.md"):
        shutil.copy(ROOT / name, tmp_path)
    path = tmp_path / "labs" / "01_single_device.ipynb"
    return path, json.loads(path.read_text())


def test_the_reading_order_test_catches_a_page_that_imports_from_a_later_lab(tmp_path):
    """The broken variant: Lab 1 importing Lab 4's reverse_buckets."""
    path, lab = lab_one_in_a_copy(tmp_path)
    lab["cells"].append({"cell_type": "code", "source": ["from labcode.overlap import reverse_buckets\n"],
                         "metadata": {}, "outputs": [], "execution_count": None})
    path.write_text(json.dumps(lab))
    breaks = reading_order_breaks(tmp_path)
    assert [b for b in breaks if "reverse_buckets" in b] == [
        f"labs/01_single_device cell {len(lab['cells']) - 1}: labcode.overlap.reverse_buckets comes from "
        "labs/04_ddp, later in _toc.yml"], breaks


def test_an_alias_imported_in_one_cell_is_followed_into_the_next(tmp_path):
    """The broken variant the test missed until issue 60: `import labcode.costmodel as cm` in one
    cell of Lab 1 and `cm.log2_ceil` in a later one (Lab 3 writes it)."""
    path, lab = lab_one_in_a_copy(tmp_path)
    for source in ("import labcode.costmodel as cm\n", "L = cm.log2_ceil(8)\n"):
        lab["cells"].append({"cell_type": "code", "source": [source], "metadata": {}, "outputs": [],
                             "execution_count": None})
    path.write_text(json.dumps(lab))
    assert [b for b in reading_order_breaks(tmp_path) if "log2_ceil" in b] == [
        f"labs/01_single_device cell {len(lab['cells']) - 1}: labcode.costmodel.log2_ceil comes from "
        "labs/03_allreduce_algorithms, later in _toc.yml"]
