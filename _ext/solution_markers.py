"""The labs' solution markers (`# HINT:`, `### BEGIN SOLUTION`, `### END SOLUTION`) are for
`make student`; the book shows each lab's code without them (teach.solutions)."""
from docutils import nodes
from sphinx.application import Sphinx

from teach.solutions import is_marker, strip_markers


def drop_markers(app: Sphinx, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if any(is_marker(line) for line in text.split("\n")):
            block.children = [nodes.Text(strip_markers(text))]
            block.rawsource = strip_markers(block.rawsource)


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", drop_markers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
