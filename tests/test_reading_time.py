"""Each page's reading time (tools/reading_time.py): no page of the book over LIMIT_MIN minutes
(issue 46), and the count reads what a reader reads, nothing else."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import reading_time  # noqa: E402  (tools/reading_time.py)

LIMIT_MIN = 12
# Pages still over the limit, each with what will bring it under. The test fails when a page
# not listed is over, and when a listed one is under (strike it from the list).
TOO_LONG: dict[str, str] = {}


def test_no_page_takes_longer_than_the_limit_to_read():
    minutes = {str(p.relative_to(ROOT)): reading_time.minutes(p) for p in reading_time.toc_pages()}
    over = {page: round(m, 1) for page, m in minutes.items() if m > LIMIT_MIN}
    assert set(over) <= set(TOO_LONG), f"over {LIMIT_MIN} minutes of reading: {over}"
    under = sorted(set(TOO_LONG) - set(over))
    assert not under, f"now under {LIMIT_MIN} minutes: strike {under} from TOO_LONG"


PAGE = """---
jupytext: {}
---
# Title

Five words of prose here.

```{code-cell} ipython3
print("code is not read as prose at all")
```

$$
x = y + z \\text{ no words }
$$

:::{admonition} How this is checked
:class: dropdown

Folded words a reader opens on purpose.
:::

:::{note}
Two more.
:::

(label-name)=
## References

- Author, A. A long title of a paper. Journal 2019.
"""


def test_the_count_reads_prose_and_skips_code_math_folded_boxes_and_references():
    text = reading_time.prose(PAGE)
    assert reading_time.WORD.findall(text) == ["Title", "Five", "words", "of", "prose", "here",
                                               "Two", "more"]


@pytest.mark.parametrize("folded", [False, True])
def test_a_folded_box_is_off_the_readers_path(folded):
    box = ":::{admonition} How this is checked\n" + (":class: dropdown\n" if folded else "") \
        + "\none two three\n:::\n"
    assert len(reading_time.WORD.findall(reading_time.prose(box))) == (0 if folded else 3)
