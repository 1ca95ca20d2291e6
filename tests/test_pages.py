"""booktools.pages, the page model every page rule walks: the pages in _toc.yml's order, and each
page's fences, prose and cells, parsed once. Each test also holds the case it must not get wrong."""
import json
from pathlib import Path

from booktools.pages import Page, on_disk, toc

CHAPTER = """---
kernelspec: {}
---
(ch-x)=
# A chapter

Prose, with `code` inline.

```{code-cell} ipython3
:tags: [hide-input]
x = 1
```

::::{admonition} How this is checked
:class: dropdown

Folded prose.

```text
a listing
```
::::

$$
y = 2
$$

## References

1. A paper.
"""


def test_toc_lists_the_root_then_every_part_and_a_book_without_parts(tmp_path):
    pages = toc()
    assert pages[0].name == "intro" and pages[0].part == ""
    assert all(page.path.is_file() and page.part for page in pages[1:])
    assert {page.name for page in on_disk()} == {page.name for page in pages}
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: labs/00_x\n")
    assert [(p.name, p.path.suffix) for p in toc(tmp_path)] == [("intro", ".md"), ("labs/00_x", ".ipynb")]


def test_a_chapter_has_its_fences_nested_its_prose_and_its_code_cells():
    page = Page("chapters/x", Path("x.md"), source=CHAPTER)
    assert [(f.name, f.argument, f.first, f.depth, f.is_code) for f in page.fences] == [
        ("code-cell", "ipython3", 10, 0, True), ("admonition", "How this is checked", 15, 0, False),
        ("", "text", 20, 1, True)]
    assert page.fences[1].options == {"class": "dropdown"} and page.fences[1].folded
    assert page.fences[2].text_lexer == "text" and page.fences[2].content == [(20, "a listing")]
    prose = [(line.number, line.text, line.folded) for line in page.prose if line.text.strip()]
    assert prose == [(5, "# A chapter", False), (7, "Prose, with `code` inline.", False),
                     (17, "Folded prose.", True)]
    assert page.title == "A chapter" and page.paragraphs == ["# A chapter", "Prose, with `code` inline.",
                                                             "Folded prose."]
    code = page.code_cells
    assert [(c.where, c.tags, c.source.split("\n")) for c in code] == [("line 10", ["hide-input"], ["", "x = 1"])]
    assert [c.kind for c in page.cells] == ["markdown", "code", "markdown"]


def test_a_lab_has_its_cells_outputs_and_the_fences_of_each_markdown_cell(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Lab 9\n", "\n", "```text\n", "out\n", "```"]},
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "execution_count": 1, "source": "print(1)",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n", "\x1b[31m2\x1b[0m\n"]},
                     {"output_type": "execute_result", "data": {"text/plain": ["3"], "text/html": ["<b/>"]}}]},
        {"cell_type": "markdown", "metadata": {}, "source": "```python\n# not a heading\n```\nText."},
    ]
    path = tmp_path / "09_x.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}}))
    page = Page("labs/09_x", path)
    assert page.is_lab and page.file == "labs/09_x.ipynb"
    assert [(f.cell, f.first, f.text_lexer) for f in page.fences] == [(0, 4, "text"), (2, 2, None)]
    [code] = page.code_cells
    assert (code.where, code.tags, code.execution_count, code.output_texts) == ("cell 1", ["hide-input"], 1, ["1\n2\n"])
    assert [(line.cell, line.number, line.text) for line in page.prose if line.text.strip()] == [
        (0, 1, "# Lab 9"), (2, 4, "Text.")]
