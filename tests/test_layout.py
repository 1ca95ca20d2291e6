"""The kit's layout: no import loop, no private name imported across modules, and DPLAB_* read in
one module (dplab/cluster/settings.py). Each check also runs on a broken variant it must catch."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path


from tests.support.pages import code_to_scan

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dplab", "labcode")
SETTINGS_MODULE = "dplab/cluster/settings.py"
HUB_SAMPLES = ("hub/jupyterhub_config.py", "hub/jupyterhub_slurm_config.py")


# -- the import graph -----------------------------------------------------------------

def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages under root."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, with relative imports made absolute."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(root: Path, packages=PACKAGES):
    """(edges, private): edges maps each module to {imported module: line}; private lists
    (file, line, text) where a module imports or uses another module's _private name."""
    mods = modules(root, packages)
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    private = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        aliases = {}  # local name -> one of our modules
        where = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[name].setdefault(a.name, node.lineno)
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(name, is_package, node)
                for a in node.names:
                    target = f"{source}.{a.name}" if source else a.name
                    if target in mods:  # a module: `from pkg import mod`
                        edges[name].setdefault(target, node.lineno)
                        aliases[a.asname or a.name] = target
                    elif source in mods:
                        edges[name].setdefault(source, node.lineno)
                        if a.name.startswith("_") and source != name:
                            private.append((str(where), node.lineno, f"from {source} import {a.name}"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")
                    and aliases[node.value.id] != name):
                private.append((str(where), node.lineno, f"{node.value.id}.{node.attr} ({aliases[node.value.id]})"))
    edges = {m: {t: line for t, line in ts.items() if t != m} for m, ts in edges.items()}
    return edges, private


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every import loop, as the modules around it (one per strongly connected component)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def describe_cycle(edges, component: list[str]) -> str:
    """One loop inside a component, with the line of each import: a -> b (line) -> ... -> a."""
    inside = set(component)
    path, seen = [component[0]], {component[0]}
    while True:
        here = path[-1]
        nxt = next(t for t in sorted(edges[here]) if t in inside)
        if nxt in seen:
            loop = path[path.index(nxt):] + [nxt]
            return " -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {nxt}"
        path.append(nxt)
        seen.add(nxt)


def test_the_kit_has_no_import_loop():
    edges, _ = imports(ROOT)
    loops = [f"{', '.join(c)} import each other, for example {describe_cycle(edges, c)}" for c in cycles(edges)]
    assert loops == [], "import loops:\n" + "\n".join(loops)


def test_no_module_imports_another_modules_private_name():
    _, private = imports(ROOT)
    assert private == [], "private names used across modules:\n" + "\n".join(
        f"{f}:{line}: {text}" for f, line, text in private)


def test_the_page_tools_do_not_depend_on_the_clusters_plumbing():
    """dplab's top modules (what pages use) import from dplab.cluster only the settings (data.py
    reads the mnist setting); the plumbing may use them, not the other way round."""
    edges, _ = imports(ROOT)
    tools = [m for m in edges if m.startswith("dplab.") and not m.startswith("dplab.cluster")]
    wrong = [f"{m} imports {t} (line {line})" for m in tools for t, line in edges[m].items()
             if t.startswith("dplab.cluster") and t != "dplab.cluster.settings"]
    assert tools and wrong == [], wrong


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_loop_and_a_private_import_are_caught(tmp_path):
    """The broken variant: today's old layout in small (cluster -> slurm -> cluster, a lazy import
    included, and slurm importing cluster's _shutdown_engines)."""
    root = _package(tmp_path, {
        "kit/__init__.py": "",
        "kit/cluster.py": "def _shutdown_engines():\n    pass\n\ndef start():\n    from . import slurm\n",
        "kit/slurm.py": "from .cluster import _shutdown_engines\nfrom kit import cluster as c\nc._reap\n",
        "kit/fine.py": "from .cluster import start\nimport kit.slurm\n",
    })
    edges, private = imports(root, ("kit",))
    assert edges["kit.fine"] == {"kit.cluster": 1, "kit.slurm": 2}
    loops = cycles(edges)
    assert loops == [["kit.cluster", "kit.slurm"]]
    assert describe_cycle(edges, loops[0]) in (
        "kit.cluster (line 5) -> kit.slurm (line 1) -> kit.cluster",
        "kit.slurm (line 1) -> kit.cluster (line 5) -> kit.slurm")
    assert private == [("kit/slurm.py", 1, "from kit.cluster import _shutdown_engines"),
                       ("kit/slurm.py", 3, "c._reap (kit.cluster)")]


# -- DPLAB_* is read in one module ------------------------------------------------------

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
    root = _package(tmp_path, {
        "dplab/data.py": "import os\n\nroot = os.environ.get('DPLAB_MNIST')\n",
        "dplab/cluster/settings.py": "import os\nos.environ.get('DPLAB_ENGINES')\n",
        "hub/jupyterhub_config.py": "def f(env):\n    return env.get('DPHUB_MODE'), env['DPLAB_ENGINES']\n",
        "chapters/x.md": "text\n\n```{code-cell} ipython3\n:tags: [hide-input]\nimport os\n"
                         "p = os.environ['DPLAB_ENGINES']\n```\n",
        "labs/00_x.ipynb": json.dumps({"cells": [
            {"cell_type": "markdown", "source": ["os.environ['DPLAB_NOT_CODE']"]},
            {"cell_type": "code", "source": ["%%px\n", "import os\n", "n = os.getenv('DPLAB_ENGINES')\n"]}]}),
    })
    assert stray_reads(root) == [
        "dplab/data.py:3: reads DPLAB_MNIST",
        "hub/jupyterhub_config.py:2: reads DPLAB_ENGINES",
        "labs/00_x.ipynb (cell 1):3: reads DPLAB_ENGINES",
        "chapters/x.md:6: reads DPLAB_ENGINES",
    ]


# -- reading order: a page uses only what earlier pages wrote ------------------------------

# A chapter may run the code of a lab placed after it, where the preview is deliberate: the
# chapter's numbers then come from the code that the learner writes later. Each exception is
# (page, the later page it uses), with its reason; the page says so in a paragraph that
# names the lab with {ref} and the words "ahead of".
PREVIEWS = {
    ("chapters/allreduce_algorithms", "labs/03_allreduce_algorithms"):
        "the chapter counts the bytes of the lab's own naive, tree and ring functions",
    ("chapters/ddp_inside", "labs/04_ddp"):
        "DDP's rebuilt buckets are compared with the lab's reverse_buckets",
    ("chapters/large_batch", "labs/06_transformer_ddp"):
        "the warm-up figure comes from the lab's transformer",
    ("chapters/mixed_precision", "labs/06_transformer_ddp"):
        "the measured model's size comes from the lab's transformer",
    ("chapters/mixed_precision", "labs/07_sharding"):
        "the ZeRO accounting's K, which the sharding part defines",
    ("chapters/sharding", "labs/07_sharding"):
        "the chapter's bytes per rank are the lab's model_state_bytes and sent_bytes",
    ("chapters/stragglers", "labs/08_stragglers"):
        "the chapter's straggler model is the lab's expected_step_time",
}


def toc_pages(root: Path = ROOT) -> list[str]:
    """The book's pages in reading order, as _toc.yml lists them (without suffix)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def page_path(root: Path, page: str) -> Path:
    return root / (page + (".ipynb" if page.startswith("labs/") else ".md"))


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
    """page -> (module, name, where) for every labcode name the page's code uses, read from
    code_to_scan's cells of the labs and chapters."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for file, first, source in code_to_scan(root):
        m = re.fullmatch(r"(\S+)\.(?:ipynb \(cell (\d+)\)|md)", file)
        if not m:  # a module or a chapter's script: no page
            continue
        page, where = m.group(1), f"cell {m.group(2)}" if m.group(2) else f"line {first}"
        tree = ast.parse(source)
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labcode"):
                for a in node.names:
                    if node.module == "labcode":
                        aliases[a.asname or a.name] = a.name
                    else:
                        found.setdefault(page, set()).add((node.module.split(".")[1], a.name, where))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("labcode."):
                        aliases[a.asname or a.name] = a.name.split(".")[1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases:
                found.setdefault(page, set()).add((aliases[node.value.id], node.attr, where))
    return found


def reading_order_breaks(root: Path = ROOT, previews=PREVIEWS) -> list[str]:
    """Every use of a labcode name that a later page writes, outside `previews`; and every
    preview whose page does not say so."""
    order = toc_pages(root)
    position = {page: i for i, page in enumerate(order)}
    writers, uses = labcode_writers(root), labcode_uses(root)
    breaks = []
    for page in order:
        for module, name, where in sorted(uses.get(page, ())):
            writer = writers.get((module, name))
            if writer is None:
                breaks.append(f"{page} {where}: labcode.{module}.{name} is written by no page")
            elif position[writer] > position[page] and (page, writer) not in previews:
                breaks.append(f"{page} {where}: labcode.{module}.{name} comes from {writer}, "
                              "later in _toc.yml")
    for page, writer in previews:
        label = "lab-" + str(int(Path(writer).name[:2]))
        paragraphs = [" ".join(p.split()) for p in page_path(root, page).read_text().split("\n\n")]
        if not any(f"{{ref}}`{label}`" in p and "ahead of" in p for p in paragraphs):
            breaks.append(f"{page}: uses {writer} ahead of it, but no paragraph says so "
                          f"(name {{ref}}`{label}` and say 'ahead of')")
    return breaks


def test_a_page_uses_only_labcode_that_earlier_pages_wrote():
    breaks = reading_order_breaks()
    assert breaks == [], "\n".join(breaks)


def test_every_preview_is_used():
    writers = labcode_writers()
    used = {(page, writers.get((m, n))) for page, uses in labcode_uses().items() for m, n, _ in uses}
    assert set(PREVIEWS) <= used, set(PREVIEWS) - used


def test_the_reading_order_test_catches_a_page_that_imports_from_a_later_lab(tmp_path):
    """The broken variant: Lab 1 importing Lab 4's reverse_buckets, and a preview whose
    page stopped saying so."""
    import shutil

    for part in ("chapters", "labs", "labcode"):
        shutil.copytree(ROOT / part, tmp_path / part)
    for name in ("_toc.yml", "intro.md"):
        shutil.copy(ROOT / name, tmp_path)
    path = page_path(tmp_path, "labs/01_single_device")
    lab = json.loads(path.read_text())
    lab["cells"].append({"cell_type": "code", "source": ["from labcode.overlap import reverse_buckets\n"],
                         "metadata": {}, "outputs": [], "execution_count": None})
    path.write_text(json.dumps(lab))
    breaks = reading_order_breaks(tmp_path, previews={})
    assert any(b.startswith("labs/01_single_device cell") and "reverse_buckets" in b
               and "labs/04_ddp" in b for b in breaks), breaks
    assert any(b.startswith("chapters/sharding ") for b in breaks), breaks
    silent = dict(PREVIEWS)
    silent[("chapters/collectives", "labs/02_data_parallel_by_hand")] = "a preview nobody wrote"
    assert "chapters/collectives: uses labs/02_data_parallel_by_hand ahead of it, but no " \
           "paragraph says so (name {ref}`lab-2` and say 'ahead of')" in reading_order_breaks(
               tmp_path, previews=silent)
