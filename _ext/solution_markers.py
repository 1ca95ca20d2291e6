"""The labs' solution markers (`### BEGIN SOLUTION: hint`, `### END SOLUTION`) are for
`make student`; the book shows each lab's code without them (tools/solutions.py)."""
import sys
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from solutions import is_marker, strip_markers  # noqa: E402  (authoring tooling, not the kit)


def drop_markers(app: Sphinx, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if any(is_marker(line) for line in text.split("\n")):
            block.children = [nodes.Text(strip_markers(text))]
            block.rawsource = strip_markers(block.rawsource)


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", drop_markers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
