"""Write the code the labs and chapters teach into the `labcode` package, so that benchmarks,
tests and other pages import the page's own code instead of a copy of it.

A lab marks a code cell for export with the cell tag `export-MODULE` (JupyterLab's property
inspector, or the cell's metadata), and a chapter marks a MyST code cell (```{code-cell}
ipython3) with the same tag in its options (`:tags: [export-MODULE]`): the reader's page does
not show it. (A first line `#| export: MODULE`, the marker of before, is refused with what to
do instead: the reader saw it.) From each marked cell the tool
takes the top-level functions, classes and UPPER_CASE constants, in the book's order (that
of _toc.yml), and nothing that runs. It writes them to labcode/MODULE.py with the imports
they need, taken from the page's own import lines, and a comment that names the page and
section defining each. Exported code may use only its arguments, imports and other exported
names (a name that another module exported earlier is imported from it): a name the page
happens to hold (a lab's `rank`, `comm`, a process group; a chapter's data or settings) is
refused with the cell named.

    python -m booktools.export           # write labcode/
    python -m booktools.export --check   # exit 1 if labcode/ differs from what the pages say

The pages are read through booktools.pages (a chapter as a notebook: its {code-cell} blocks and
the Markdown between them), and a lab's code as the book shows it, without the solution
markers (teach.solutions).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from booktools.pages import ROOT, page_at, toc
from teach.solutions import strip_markers

TAG = re.compile(r"^export-([A-Za-z_]\w*)$")
OLD_MARKER = re.compile(r"^#\|\s*export:\s*([A-Za-z_]\w*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")
LEAD = re.compile(r"^\*\*(.+?)\.?\*\*")  # a paragraph's bold lead-in, "**Ring all-reduce.** ..."
# The command labcode/'s files name as their maker: an alias of this module. Changing it
# changes every file of labcode/ (run the export after).
TOOL = "tools/export_labs.py"


class ExportError(Exception):
    """A marked cell that cannot be exported as it stands; the message says which and why."""


@dataclass
class Cell:
    kind: str    # "markdown" or "code"
    source: str  # code cells: Python without IPython magic lines or MyST options
    where: str   # how an error names the cell: "04_ddp.ipynb cell 46", "ddp.md line 380"
    headings: list[str] = field(default_factory=list)  # markdown: its headings' text, in order
    lead: str | None = None  # markdown: the bold lead-in of the first paragraph after the last heading
    tags: list[str] = field(default_factory=list)  # code: the cell's tags (export-MODULE among them)


@dataclass
class Module:
    pages: list[str] = field(default_factory=list)  # "labs/04_ddp.ipynb", "chapters/ddp.md"
    imports: set[str] = field(default_factory=set)
    blocks: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def _without_magics(src: str) -> str:
    """Python source without IPython magic lines (`%%px`, `%matplotlib`)."""
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))


def read_page(path: Path) -> list[Cell]:
    """A lab's or a chapter's cells (a chapter's: its {code-cell} blocks and the Markdown between
    them); a markdown cell with its headings and lead-in, from its prose."""
    page = page_at(path)
    prose = {}
    for line in page.prose:
        prose.setdefault(line.cell, []).append(line)
    cells = []
    for cell in page.cells:
        if cell.kind == "code":
            code = cell.source
            if page.is_lab:
                code = strip_markers(code)  # the book's code, without the solution markers
                where = f"{path.name} cell {cell.index}"
            else:
                lines = code.split("\n")
                first = next((k for k, line in enumerate(lines)
                              if line.strip() and not line.lstrip().startswith("%")), 0)
                where = f"{path.name} line {cell.line + first}"  # the code's first line
            cells.append(Cell("code", _without_magics(code), where, tags=cell.tags))
            continue
        lines = prose.get(cell.index, [])
        if not page.is_lab and not any(line.text.strip() for line in lines):
            continue  # only options, labels, figures or math between two code cells
        heads = [i for i, line in enumerate(lines) if line.heading]
        after = lines[heads[-1] + 1:] if heads else lines
        text = next((line.text.strip() for line in after if line.text.strip()), "")
        bold = LEAD.match(text)
        cells.append(Cell("markdown", cell.source, f"{path.name} {cell.where}",
                          [HEADING.match(lines[i].text.strip()).group(2) for i in heads],
                          bold.group(1) if bold else None))
    return cells


def _page_imports(cells: list[Cell]) -> dict[str, str]:
    """Every name a page's import lines bind (top-level, any cell) -> that one import, as source."""
    bound: dict[str, str] = {}
    for cell in cells:
        if cell.kind != "code":
            continue
        try:
            tree = ast.parse(cell.source)
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


def book_order(pages: list[str]) -> list[str]:
    """Pages ("labs/04_ddp.ipynb", "chapters/ddp.md") in _toc.yml's order; others after, by name."""
    order = [page.name for page in toc()]
    return sorted(pages, key=lambda page: (order.index(page.rsplit(".", 1)[0])
                                           if page.rsplit(".", 1)[0] in order else len(order), page))


def collect(labs: list[Path], chapters: list[Path] = ()) -> dict[str, Module]:
    """Read the marked cells of the given labs and chapters into modules, in the book's order."""
    paths = {f"labs/{p.name}": p for p in labs}
    paths.update({f"chapters/{p.name}": p for p in chapters})
    modules: dict[str, Module] = {}
    exported_by: dict[str, str] = {}  # every name exported so far -> its module
    for page in book_order(list(paths)):
        path = paths[page]
        cells = read_page(path)
        imports = _page_imports(cells)
        section, lead = path.stem, None
        for cell in cells:
            if cell.kind == "markdown":
                section = cell.headings[-1] if cell.headings else section
                lead = cell.lead  # the paragraph after the last heading, if it has one
                continue
            if cell.kind != "code":
                continue
            code = cell.source
            where = cell.where
            old = OLD_MARKER.match(code.lstrip("\n").split("\n", 1)[0])
            if old:
                raise ExportError(f"{where} marks its export with a first line '{old.group(0)}', which the "
                                  f"reader sees: remove the line and give the cell the tag export-{old.group(1)}")
            marked = [m.group(1) for t in cell.tags if (m := TAG.match(t))]
            if not marked:
                continue
            if len(marked) > 1:
                raise ExportError(f"{where} has the tags of {len(marked)} modules ({', '.join(marked)}): "
                                  "a cell exports into one")
            module = marked[0]
            mod = modules.setdefault(module, Module())
            if page not in mod.pages:
                mod.pages.append(page)
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
                        raise ExportError(f"{where} exports {name}, which labcode.{module} already has")
                    mod.names.add(name)
                    exported_by[name] = module
            needed = loaded - bound - mod.names - set(dir(builtins))
            missing = sorted(n for n in needed if n not in imports and n not in exported_by)
            if missing:
                raise ExportError(f"{where} exports code that uses {', '.join(missing)}, which is neither an "
                                  "argument, an import nor exported: pass it as an argument")
            # a name another module exported earlier is imported from it
            mod.imports.update(imports[n] if n in imports else f"from labcode.{exported_by[n]} import {n}"
                               for n in needed)
            for node in nodes:
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                body = "\n".join(lines[start - 1:node.end_lineno])
                where_taught = f"section \"{section}\"" + (f", \"{lead}\"" if lead else "")
                mod.blocks.append(f"# From {page}, {where_taught}.\n{body}")
    return modules


def render(modules: dict[str, Module]) -> dict[str, str]:
    """File name -> text of every file of the labcode package."""
    tool = TOOL
    files = {}
    for name, mod in sorted(modules.items()):
        kinds = {page.split("/")[0] for page in mod.pages}
        kind = {frozenset({"labs"}): "lab", frozenset({"chapters"}): "chapter"}.get(frozenset(kinds), "page")
        first = f"Generated from {', '.join(mod.pages)} by {tool}: do not edit."
        if len(first) > 88:
            first = textwrap.fill(first, 88)
        head = (f'"""{first}\n\n'
                f"Change the {kind}, then run `python {tool}`; a test fails while the two differ.\n\"\"\"\n")
        imports = sorted(mod.imports, key=lambda s: (s.startswith("from"), s))
        files[f"{name}.py"] = head + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(mod.blocks) + "\n"
    listing = "\n".join(textwrap.fill(f"- `labcode.{name}`: from " + ", ".join(mod.pages), 88,
                                      subsequent_indent="  ")
                        for name, mod in sorted(modules.items()))
    files["__init__.py"] = (f'"""The code the labs and chapters teach, exported from their cells by\n'
                            f"{tool}: do not edit.\n\n{listing}\n\"\"\"\n")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the package differs from the pages")
    parser.add_argument("--labs", type=Path, default=ROOT / "labs", help="folder of the lab notebooks")
    parser.add_argument("--chapters", type=Path, default=ROOT / "chapters", help="folder of the MyST chapters")
    parser.add_argument("--out", type=Path, default=ROOT / "labcode", help="the package to write")
    args = parser.parse_args(argv)
    try:
        files = render(collect(sorted(args.labs.glob("*.ipynb")), sorted(args.chapters.glob("*.md"))))
    except ExportError as e:
        print(f"booktools.export: {e}", file=sys.stderr)
        return 2
    present = {p.name for p in args.out.glob("*.py")} if args.out.exists() else set()
    stale = sorted(present - set(files))
    differ = sorted(n for n, text in files.items() if not (args.out / n).exists() or (args.out / n).read_text() != text)
    if args.check:
        if stale or differ:
            print(f"labcode differs from the labs and chapters ({', '.join(differ + stale)}): "
                  "run python -m booktools.export", file=sys.stderr)
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
