"""The book's drawn figures are what their scripts draw now.

Every img/<page>/make_figures.py defines figures() -> {file name: SVG bytes}, drawn from the
chapters' and labs' own functions (labcode); the stored files must equal a fresh drawing, so a
figure cannot disagree with the code the text quotes.
"""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(ROOT.glob("img/*/make_figures.py"))


def load(script: Path):
    name = f"figures_{script.parent.name}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.parent.name)
def test_stored_figures_match_their_script(script):
    drawn = load(script).figures()
    assert drawn, f"{script.relative_to(ROOT)} draws nothing"
    stale = [name for name, data in drawn.items() if (script.parent / name).read_bytes() != data] \
        if all((script.parent / n).is_file() for n in drawn) else sorted(drawn)
    assert stale == [], (f"{stale} in {script.parent.relative_to(ROOT)} differ from what "
                         f"{script.relative_to(ROOT)} draws: run .venv/bin/python {script.relative_to(ROOT)}")


def test_every_stored_figure_has_a_script_or_is_hand_drawn():
    """An SVG or PNG beside a make_figures.py is one that it draws (no leftovers from old versions)."""
    for script in SCRIPTS:
        drawn = set(load(script).figures())
        stored = {p.name for p in script.parent.iterdir() if p.suffix in (".svg", ".png")}
        assert stored <= drawn, f"{script.parent.relative_to(ROOT)}: {sorted(stored - drawn)} not drawn by its script"


ALLREDUCE = ROOT / "img" / "allreduce" / "make_figures.py"


@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("name", ["ring", "recursive_doubling", "rabenseifner"])
def test_every_rank_of_a_drawn_all_reduce_sends_the_cost_models_messages_and_bytes(name, p):
    """The all-reduce figures record each algorithm's messages on threads (record() checks the
    sums and the rounds); here every rank's own count is the cost model's, at n = p elements."""
    import labcode.costmodel as cm

    figures = load(ALLREDUCE)
    (allreduce,) = [fn for fn, known in figures.NAMES.items() if known == name]
    messages, _ = figures.record(allreduce, p)
    want = cm.cost(name, float(p), p)
    for r in range(p):
        sent = [m for m in messages if m.src == r]
        assert len(sent) == want.messages, (name, p, r)
        assert sum(m.size for m in sent) == want.wire_bytes, (name, p, r)


