"""torch's private names (and os._exit) that the book's code uses: all listed in dplab/internals.py,
all still there, or a failure that names the symbol."""
import ast
import re
from pathlib import Path

import torch

from booktools.pages import code_to_scan
from dplab import internals

ROOT = Path(__file__).resolve().parent.parent
OWN_LIST = "dplab/cluster/ipp.py"  # ipyparallel's private names: listed there (tests/test_ipp.py)


def private_uses(root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, module or name) of every private name imported or read from outside our code."""
    sources = [(where, ast.parse(source)) for where, _, source in code_to_scan(root) if where != OWN_LIST]
    ours = {n.name for _, t in sources for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    ours |= {n.attr for _, t in sources for n in ast.walk(t) if isinstance(n, ast.Attribute)
             and isinstance(n.ctx, ast.Store) and ast.unparse(n.value) in ("self", "cls")}
    private = re.compile(r"(?:^|\.)_[a-z]")
    found = []
    for where, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and private.search(node.module or ""):
                found += [(where, f"{node.module}:{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                found += [(where, a.name) for a in node.names if private.search(a.name)]
            elif isinstance(node, ast.Attribute) and re.match(r"_[a-z]", node.attr) \
                    and ast.unparse(node.value) not in ("self", "cls") and node.attr not in ours \
                    and not node.attr.startswith("_dplab"):  # what the kit sets on ipyparallel's objects
                found.append((where, node.attr))
    return sorted(set(found))


def listed(use: str) -> bool:
    symbols = [s for s, _, _ in internals.INTERNALS]
    return any(use == s or use == s.partition(":")[0] or s.endswith((":" + use, "." + use)) for s in symbols)


def test_every_private_name_the_book_uses_is_still_there():
    assert internals.missing() == [], "\n".join(internals.missing())


def test_every_private_name_the_book_uses_is_listed():
    unlisted = [f"{where}: {use}" for where, use in private_uses() if not listed(use)]
    assert unlisted == [], "list these in dplab/internals.py, with where and why:\n" + "\n".join(unlisted)


def test_every_listed_name_is_used():
    uses = {use for _, use in private_uses()}
    for symbol, _, _ in internals.INTERNALS:
        module, _, path = symbol.partition(":")
        assert {symbol, module, path.split(".")[-1]} & uses, f"{symbol} is listed but used nowhere"


def test_an_upgrade_that_removes_one_fails_naming_it(monkeypatch):
    """The broken variant: a torch without DDP's _get_ddp_logging_data."""
    monkeypatch.delattr(torch.nn.parallel.DistributedDataParallel, "_get_ddp_logging_data")
    (message,) = internals.missing()
    assert message.startswith(f"torch {torch.__version__} has no "
                              "torch.nn.parallel.DistributedDataParallel._get_ddp_logging_data"), message
    assert "Lab 4" in message


def test_a_new_private_name_is_caught(tmp_path):
    """The broken variant: a lab that reads torch._C._get_tracing_state, which no entry lists."""
    import json
    import shutil

    shutil.copytree(ROOT / "dplab", tmp_path / "dplab")
    (tmp_path / "labcode").mkdir()
    (tmp_path / "chapters").mkdir()
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "09_x.ipynb").write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["import torch\n", "state = torch._C._get_tracing_state()\n"]}]}))
    assert ("labs/09_x.ipynb (cell 0)", "_get_tracing_state") in private_uses(tmp_path)
    assert not listed("_get_tracing_state")
