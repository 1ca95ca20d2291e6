"""Write the code the labs teach into the `labcode` package, so that benchmarks, tests and
chapters import the lab's own code instead of a copy of it.

A lab marks a code cell for export with the first line (after a `%%px` line, if any)

    #| export: MODULE

From each marked cell the tool takes the top-level functions, classes and UPPER_CASE constants,
in the lab's order, and nothing that runs. It writes them to labcode/MODULE.py with the imports
they need, taken from the lab's own import lines, and a comment that names the lab and section
defining each. Exported code may use only its arguments, imports and other exported names: a
name the engines happen to hold (`rank`, `comm`, a process group) is refused with the cell named.

    python tools/export_labs.py           # write labcode/
    python tools/export_labs.py --check   # exit 1 if labcode/ differs from what the labs say
"""
from __future__ import annotations

import argparse
import ast
import builtins
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^#\|\s*export:\s*([A-Za-z_]\w*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$", flags=re.M)
LEAD = re.compile(r"^\*\*(.+?)\.?\*\*")  # a paragraph's bold lead-in, "**Ring all-reduce.** ..."


class ExportError(Exception):
    """A marked cell that cannot be exported as it stands; the message says which and why."""


@dataclass
class Module:
    labs: list[str] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    blocks: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def _code(cell: dict) -> str:
    """A code cell's Python, without IPython magic lines."""
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))


def _lab_imports(cells: list[dict]) -> dict[str, str]:
    """Every name a lab's import lines bind (top-level, any cell) -> that one import, as source."""
    bound: dict[str, str] = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse(_code(cell))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    name = a.asname or a.name.split(".")[0]
                    bound.setdefault(name, ast.unparse(ast.Import(names=[a])))
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for a in node.names:
                    bound.setdefault(a.asname or a.name,
                                     ast.unparse(ast.ImportFrom(module=node.module, names=[a], level=node.level)))
    return bound


def _exported(node: ast.stmt) -> list[str]:
    """Names a top-level statement defines if it is exported (defs, classes, UPPER_CASE constants)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if names and len(names) == len(targets) and all(n.isupper() for n in names):
            return names
    return []


def _bound_and_loaded(nodes: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names the nodes bind anywhere inside them, and names they read."""
    bound, loaded = set(), set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            elif isinstance(n, ast.arg):
                bound.add(n.arg)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in n.names)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                bound.add(n.name)
    return bound, loaded


def collect(labs: list[Path]) -> dict[str, Module]:
    """Read the marked cells of the given labs into modules, in lab and cell order."""
    modules: dict[str, Module] = {}
    for lab in labs:
        cells = json.loads(lab.read_text())["cells"]
        imports = _lab_imports(cells)
        section, lead = lab.stem, None
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                heads = list(HEADING.finditer(text))
                if heads:
                    section, text = heads[-1].group(2), text[heads[-1].end():]
                bold = LEAD.match(text.strip())  # the paragraph after the last heading, if it has one
                lead = bold.group(1) if bold else None
                continue
            if cell["cell_type"] != "code":
                continue
            code = _code(cell)
            first = code.lstrip("\n").split("\n", 1)[0]
            match = MARKER.match(first)
            if not match:
                continue
            where = f"{lab.name} cell {index}"
            mod = modules.setdefault(match.group(1), Module())
            if lab.name not in mod.labs:
                mod.labs.append(lab.name)
            lines = code.splitlines()
            tree = ast.parse(code)
            unpacked = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, (ast.Tuple, ast.List))
                        and any(isinstance(e, ast.Name) and e.id.isupper() for e in t.elts)]
            if unpacked:
                names = ", ".join(ast.unparse(e) for e in unpacked[0].elts)
                raise ExportError(f"{where} assigns {names} in one statement, which the "
                                  "export cannot take apart: write one assignment per line")
            nodes = [n for n in tree.body if _exported(n)]
            if not nodes:
                raise ExportError(f"{where} is marked for export but defines no function, class or UPPER_CASE constant")
            bound, loaded = _bound_and_loaded(nodes)
            for node in nodes:
                for name in _exported(node):
                    if name in mod.names:
                        raise ExportError(f"{where} exports {name}, which labcode.{match.group(1)} already has")
                    mod.names.add(name)
            needed = loaded - bound - mod.names - set(dir(builtins))
            missing = sorted(n for n in needed if n not in imports)
            if missing:
                raise ExportError(f"{where} exports code that uses {', '.join(missing)}, which is neither an "
                                  "argument, an import nor exported: pass it as an argument")
            mod.imports.update(imports[n] for n in needed)
            for node in nodes:
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                body = "\n".join(lines[start - 1:node.end_lineno])
                where_taught = f"section \"{section}\"" + (f", \"{lead}\"" if lead else "")
                mod.blocks.append(f"# From labs/{lab.name}, {where_taught}.\n{body}")
    return modules


def render(modules: dict[str, Module]) -> dict[str, str]:
    """File name -> text of every file of the labcode package."""
    tool = "tools/export_labs.py"
    files = {}
    for name, mod in sorted(modules.items()):
        labs = ", ".join(f"labs/{lab}" for lab in mod.labs)
        head = (f'"""Generated from {labs} by {tool}: do not edit.\n\n'
                f"Change the lab, then run `python {tool}`; a test fails while the two differ.\n\"\"\"\n")
        imports = sorted(mod.imports, key=lambda s: (s.startswith("from"), s))
        files[f"{name}.py"] = head + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(mod.blocks) + "\n"
    listing = "\n".join(f"- `labcode.{name}`: from " + ", ".join(f"labs/{lab}" for lab in mod.labs)
                        for name, mod in sorted(modules.items()))
    files["__init__.py"] = (f'"""The code the labs teach, exported from their cells by {tool}: do not edit.\n\n'
                            f"{listing}\n\"\"\"\n")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the package differs from the labs")
    parser.add_argument("--labs", type=Path, default=ROOT / "labs", help="folder of the lab notebooks")
    parser.add_argument("--out", type=Path, default=ROOT / "labcode", help="the package to write")
    args = parser.parse_args(argv)
    try:
        files = render(collect(sorted(args.labs.glob("*.ipynb"))))
    except ExportError as e:
        print(f"export_labs: {e}", file=sys.stderr)
        return 2
    present = {p.name for p in args.out.glob("*.py")} if args.out.exists() else set()
    stale = sorted(present - set(files))
    differ = sorted(n for n, text in files.items() if not (args.out / n).exists() or (args.out / n).read_text() != text)
    if args.check:
        if stale or differ:
            print(f"labcode differs from the labs ({', '.join(differ + stale)}): run python tools/export_labs.py",
                  file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(exist_ok=True)
    for n in stale:
        (args.out / n).unlink()
    for n, text in files.items():
        (args.out / n).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
