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


DDP = ROOT / "img" / "ddp" / "make_figures.py"


def test_no_sync_figure_all_reduces_only_the_last_micro_batch_and_ends_when_the_model_says():
    from labcode.formulas import overlap_step_time

    figures = load(DDP)
    k, forward = figures.NO_SYNC_K, figures.NO_SYNC_FORWARD
    compute, comm = figures.EXAMPLES["balanced"]
    every = figures.micro_batches([True] * k)
    last = figures.micro_batches([False] * (k - 1) + [True])
    assert [len(mb["comm"]) for mb in every] == [len(comm)] * k
    assert [len(mb["comm"]) for mb in last] == [0] * (k - 1) + [len(comm)]
    synced = forward + overlap_step_time(compute, comm)
    assert every[-1]["end"] == k * synced
    assert last[-1]["end"] == (k - 1) * (forward + sum(compute)) + synced
    assert last[-1]["end"] < every[-1]["end"]


def test_overlap_figure_saves_most_in_its_balanced_example():
    from labcode.formulas import overlap_step_time

    share = {name: 1 - overlap_step_time(c, m) / overlap_step_time([sum(c)], [sum(m)])
             for name, (c, m) in load(DDP).EXAMPLES.items()}
    assert max(share, key=share.get) == "balanced"


@pytest.mark.parametrize("n, p", [(10, 3), (12, 3), (11, 4), (5, 8)])
def test_sampler_figure_shows_what_distributed_sampler_returns(n, p):
    """sampler_order rebuilds the padded shuffled list from torch's per-rank indices (and
    asserts that the padding repeats its head); each rank's share is every p-th item."""
    from torch.utils.data import DistributedSampler

    figures = load(DDP)
    for epoch in (0, 1):
        order, shares = figures.sampler_order(n, p, epoch)
        for r in range(p):
            sampler = DistributedSampler(range(n), num_replicas=p, rank=r, seed=0)
            sampler.set_epoch(epoch)
            assert shares[r] == list(sampler) == order[r::p]
    assert figures.sampler_order(n, p, 0)[0] != figures.sampler_order(n, p, 1)[0]
