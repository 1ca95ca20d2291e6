"""Reading order: a page uses only the labcode that earlier pages wrote (d2l's forward-only
order), except a preview a lab's facts name (`Lab.previewed_by`), which its page announces.
Checked on a broken variant too."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from booktools.labs import labs
from booktools.pages import ROOT, as_python, toc


def previews(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(page, the later lab it uses) -> why, from each lab's facts (booktools.labs,
    `Lab.previewed_by`). A chapter may run the code of a lab placed after it where the preview
    is deliberate: the chapter's numbers then come from the code that the learner writes later;
    the page says so in a paragraph that names the lab with {ref} and the words "ahead of"."""
    return {(page, f"labs/{lab.stem}"): why for lab in labs(root) for page, why in lab.previewed_by.items()}


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
        for cell in page.code_cells:
            tree = ast.parse(as_python(cell.source))
            aliases = {}
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


def reading_order_breaks(root: Path = ROOT, allowed: dict | None = None) -> list[str]:
    """Every use of a labcode name that a later page writes, outside the `allowed` previews
    (default: the labs' own); and every preview whose page does not say so."""
    allowed = previews(root) if allowed is None else allowed
    pages = {page.name: page for page in toc(root)}
    order = list(pages)
    position = {page: i for i, page in enumerate(order)}
    writers, uses = labcode_writers(root), labcode_uses(root)
    breaks = []
    for page in order:
        for module, name, where in sorted(uses.get(page, ())):
            writer = writers.get((module, name))
            if writer is None:
                breaks.append(f"{page} {where}: labcode.{module}.{name} is written by no page")
            elif position[writer] > position[page] and (page, writer) not in allowed:
                breaks.append(f"{page} {where}: labcode.{module}.{name} comes from {writer}, "
                              "later in _toc.yml")
    for page, writer in allowed:
        label = "lab-" + str(int(Path(writer).name[:2]))
        if not any(f"{{ref}}`{label}`" in p and "ahead of" in p for p in pages[page].paragraphs):
            breaks.append(f"{page}: uses {writer} ahead of it, but no paragraph says so "
                          f"(name {{ref}}`{label}` and say 'ahead of')")
    return breaks


def test_a_page_uses_only_labcode_that_earlier_pages_wrote():
    breaks = reading_order_breaks()
    assert breaks == [], "\n".join(breaks)


def test_every_preview_is_used():
    writers = labcode_writers()
    used = {(page, writers.get((m, n))) for page, uses in labcode_uses().items() for m, n, _ in uses}
    assert set(previews()) <= used, set(previews()) - used


def test_the_reading_order_test_catches_a_page_that_imports_from_a_later_lab(tmp_path):
    """The broken variant: Lab 1 importing Lab 4's reverse_buckets, and a preview whose
    page stopped saying so."""
    import shutil

    for part in ("chapters", "labs", "labcode"):
        shutil.copytree(ROOT / part, tmp_path / part)
    for name in ("_toc.yml", "intro.md"):
        shutil.copy(ROOT / name, tmp_path)
    path = tmp_path / "labs" / "01_single_device.ipynb"
    lab = json.loads(path.read_text())
    lab["cells"].append({"cell_type": "code", "source": ["from labcode.overlap import reverse_buckets\n"],
                         "metadata": {}, "outputs": [], "execution_count": None})
    path.write_text(json.dumps(lab))
    breaks = reading_order_breaks(tmp_path, allowed={})
    assert any(b.startswith("labs/01_single_device cell") and "reverse_buckets" in b
               and "labs/04_ddp" in b for b in breaks), breaks
    assert any(b.startswith("chapters/sharding ") for b in breaks), breaks
    silent = previews(tmp_path)
    silent[("chapters/collectives", "labs/02_data_parallel_by_hand")] = "a preview nobody wrote"
    assert "chapters/collectives: uses labs/02_data_parallel_by_hand ahead of it, but no " \
           "paragraph says so (name {ref}`lab-2` and say 'ahead of')" in reading_order_breaks(
               tmp_path, allowed=silent)
