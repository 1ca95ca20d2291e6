"""Each page's reading time (booktools.reading), at 200 words a minute with captions counted: no
page of the book over reading.PAGE_LIMIT_MIN minutes (issue 46), the whole book within
reading.BOOK_LIMIT_MIN (issue 60), and the count reads what a reader reads, nothing else."""
import pytest

from booktools import reading
from booktools.pages import toc

LIMIT_MIN = reading.PAGE_LIMIT_MIN
# Pages still over the limit, each with what will bring it under. The test fails when a page
# not listed is over, and when a listed one is under (strike it from the list).
TOO_LONG: dict[str, str] = {}


def test_no_page_takes_longer_than_the_limit_to_read():
    minutes = {page.file: reading.minutes(page) for page in toc()}
    over = {page: round(m, 1) for page, m in minutes.items() if m > LIMIT_MIN}
    assert set(over) <= set(TOO_LONG), f"over {LIMIT_MIN} minutes of reading: {over}"
    under = sorted(set(TOO_LONG) - set(over))
    assert not under, f"now under {LIMIT_MIN} minutes: strike {under} from TOO_LONG"


def test_the_whole_book_reads_within_its_limit():
    minutes = {page.file: round(reading.minutes(page), 1) for page in toc()}
    total = sum(minutes.values())
    assert total <= reading.BOOK_LIMIT_MIN, (
        f"the book takes {total:.0f} minutes to read, over {reading.BOOK_LIMIT_MIN}: {minutes}")


PAGE = """---
jupytext: {}
---
# Title

Five words of prose here.

```{figure} ../img/ring.svg
:name: fig-ring

A caption is read.
```

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


def test_the_count_reads_prose_and_captions_and_skips_code_math_folded_boxes_and_references():
    text = reading.prose(PAGE)
    assert reading.WORD.findall(text) == ["Title", "Five", "words", "of", "prose", "here",
                                               "A", "caption", "is", "read", "Two", "more"]


@pytest.mark.parametrize("folded", [False, True])
def test_a_folded_box_is_off_the_readers_path(folded):
    box = ":::{admonition} How this is checked\n" + (":class: dropdown\n" if folded else "") \
        + "\none two three\n:::\n"
    assert len(reading.WORD.findall(reading.prose(box))) == (0 if folded else 3)
