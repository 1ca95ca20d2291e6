"""The kit's import graph: no import loop, no private name imported across modules, and the
page tools (dplab's top modules) apart from the cluster's plumbing. Each check also runs on a
broken variant it must catch."""
from __future__ import annotations

import ast
from pathlib import Path

from booktools.pages import ROOT

PACKAGES = ("dplab", "labcode")


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


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Each file of `files` (its path from `root`: its text) written under root."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_loop_and_a_private_import_are_caught(tmp_path):
    """The broken variant: today's old layout in small (cluster -> slurm -> cluster, a lazy import
    included, and slurm importing cluster's _shutdown_engines)."""
    root = write_files(tmp_path, {
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
