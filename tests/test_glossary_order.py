"""Every glossary term is defined before the reading path uses it (booktools.glossary): its
first use in the prose a reader reads comes on the first page its glossary entry names, or
after it. On the pages of b4f1c1c it failed on 13 terms, "bucket" among them (used in "Using
DDP", defined in "Inside DDP")."""
from pathlib import Path

import pytest

from booktools import glossary

TOC = """root: intro
parts:
- caption: Book
  chapters:
  - file: chapters/one
  - file: chapters/two
- caption: Reference
  chapters:
  - file: chapters/glossary
"""
GLOSSARY = """(ch-glossary)=
# Glossary

```{glossary}
bucket
  A group of gradients all-reduced together. {ref}`ch-two`.
```
"""


def test_no_term_is_used_before_the_page_that_defines_it():
    early = glossary.early_uses()
    assert early == [], "\n".join(f"{u.term!r} used on {u.used} before {u.defined} defines it: "
                                  f"...{u.line}..." for u in early)


@pytest.mark.parametrize("one, early", [
    ("DDP sends its gradients in buckets.", ["bucket"]),
    ("DDP sends its gradients in buckets ({ref}`ch-two`).", []),  # a pointer to where it is taught
    ("DDP sends\nits gradients in buckets,\nas {ref}`ch-two` shows.", []),  # in the same paragraph
    (":::{admonition} How\n:class: dropdown\n\nIn buckets.\n:::", []),  # folded: off the path
    ("The gradients go out one by one.", []),
], ids=["used early", "pointed ahead", "pointed ahead in the paragraph", "folded", "not used"])
def test_a_use_before_the_definition_is_found_unless_it_points_ahead(tmp_path: Path, one, early):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_toc.yml").write_text(TOC)
    (tmp_path / "intro.md").write_text("# Intro\n\nBuckets, rings and more.\n")  # the landing page: left out
    (tmp_path / "chapters" / "one.md").write_text(f"(ch-one)=\n# One\n\n{one}\n")
    (tmp_path / "chapters" / "two.md").write_text("(ch-two)=\n# Two\n\nA *bucket* is a group of gradients.\n")
    (tmp_path / "chapters" / "glossary.md").write_text(GLOSSARY)
    assert [u.term for u in glossary.early_uses(tmp_path)] == early
