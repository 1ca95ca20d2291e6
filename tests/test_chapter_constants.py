"""A chapter that states a later lab's constant instead of importing it (issue 60: a page uses
only what came before it) must state the lab's value: each pair below is read from the page's
own line and from labcode, so a lab that changes its model or its straggler parts the two."""
import ast
import re
from pathlib import Path

import pytest

import labcode.overlap
import labcode.stragglers

ROOT = Path(__file__).resolve().parents[1]

#: (file, the assignment's target as the line starts, what the lab holds)
STATED = [
    ("chapters/ddp_inside.md", "WIDE_MLP", lambda: labcode.overlap.WIDE_MLP),
    ("chapters/stragglers.md", "q, d", lambda: (labcode.stragglers.STRAGGLER_Q, labcode.stragglers.STRAGGLER_D)),
    ("img/stragglers/make_figures.py", "Q", lambda: labcode.stragglers.STRAGGLER_Q),
    ("img/stragglers/make_figures.py", "D", lambda: labcode.stragglers.STRAGGLER_D),
]


def stated(text: str, target: str):
    """The value of the page's line `target = <literal>` (its comment aside)."""
    m = re.search(rf"^{re.escape(target)} = (.+?)(?:\s+#.*)?$", text, re.M)
    assert m, f"no line '{target} = ...'"
    return eval(compile(ast.parse(m.group(1), mode="eval"), "<page>", "eval"), {})  # noqa: S307 (literals)


@pytest.mark.parametrize("file, target, lab", STATED, ids=[f"{f}:{t}" for f, t, _ in STATED])
def test_a_chapter_states_the_labs_constant(file, target, lab):
    assert stated((ROOT / file).read_text(), target) == lab(), \
        f"{file}: {target} differs from the lab's: state the lab's value"


def test_a_changed_constant_is_caught():
    """The broken variant: a chapter that keeps an old straggler probability."""
    text = (ROOT / "chapters/stragglers.md").read_text().replace("q, d = 0.1, 0.030", "q, d = 0.2, 0.030")
    assert stated(text, "q, d") != (labcode.stragglers.STRAGGLER_Q, labcode.stragglers.STRAGGLER_D)
