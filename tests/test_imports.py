"""How the tree's code finds each other: through installed packages only. No file of tests/,
tools/, _ext/, benchmarks/ or img/, and no code cell of a page (chapters, labs, intro), edits
sys.path, and no test module imports another test module or a conftest (helpers live in tests.support; pytest imports test modules by path,
--import-mode=importlib in pyproject.toml, so a conftest in a subfolder is its own module)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests", "tools", "_ext", "benchmarks", "img")


def python_files(root: Path) -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((root / folder).rglob("*.py"))]


def sources(root: Path) -> list[tuple[str, int, str]]:
    """(where, first line, Python source) of the files of FOLDERS and of every page's code cells."""
    from booktools.pages import code_to_scan

    files = [(str(p.relative_to(root)), 1, p.read_text()) for p in python_files(root)]
    cells = [s for s in code_to_scan(root) if not s[0].endswith(".py")]
    return files + cells


def path_edits(root: Path) -> list[str]:
    """'file:line' of every change to sys.path: insert, append, extend, an assignment or a slice."""
    found = []
    for where, first, source in sources(root):
        for node in ast.walk(ast.parse(source, where)):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                target = target.value if isinstance(target, ast.Subscript) else target
            if (isinstance(target, ast.Attribute) and target.attr == "path"
                    and isinstance(target.value, ast.Name) and target.value.id == "sys"):
                found.append(f"{where}:{first + node.lineno - 1}")
    return sorted(set(found))


def names_of_test_modules(root: Path) -> set[str]:
    """The names a test module or conftest could be imported by."""
    tests = root / "tests"
    return {"conftest"} | {p.stem for p in tests.rglob("test_*.py")}


def imports_of_test_modules(root: Path) -> list[str]:
    """'file:line imports NAME' where a file under tests/ imports a test module or a conftest."""
    names, found = names_of_test_modules(root), []
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            for module in modules:
                if module.split(".")[-1] in names or module.split(".")[0] in names:
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {module}")
    return found


def test_no_file_edits_sys_path():
    edits = path_edits(ROOT)
    assert edits == [], ("sys.path edited (import from an installed package instead: dplab, "
                         "labcode, teach, booktools or tests.support):\n" + "\n".join(edits))


def test_no_test_module_imports_another():
    found = imports_of_test_modules(ROOT)
    assert found == [], "test modules imported (move what they share into tests/support):\n" + "\n".join(found)


def test_both_rules_catch_their_broken_variants(tmp_path):
    """The old tree in small: a tool that put tools/ first on sys.path, a test that did the same
    with a slice, a chapter's cell that reached benchmarks/big, and test modules importing
    conftest and each other."""
    files = {
        "tools/grade.py": "import sys\nsys.path.insert(0, 'tools')\nimport solutions\n",
        "tests/test_a.py": "import sys\nsys.path[:0] = ['x']\nfrom conftest import rank_lines\n",
        "tests/student/test_b.py": "from test_a import LABS\nimport tests.support.grading\n",
        "tests/support/grading.py": "import sys\nprint(sys.path)\n",
        "benchmarks/big/run.py": "import sys\nsys.path += ['here']\n",
        "chapters/page.md": "# A page\n\n```{code-cell} ipython3\nimport sys\n"
                            "sys.path.insert(0, '../benchmarks/big')\n```\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert path_edits(tmp_path) == ["benchmarks/big/run.py:2", "chapters/page.md:5", "tests/test_a.py:2",
                                    "tools/grade.py:2"]
    assert imports_of_test_modules(tmp_path) == ["tests/student/test_b.py:1 imports test_a",
                                                 "tests/test_a.py:3 imports conftest"]
