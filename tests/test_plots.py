"""dplab.plots.takeaway: the box under a lab's Measure plot, as HTML and as plain text."""
import pytest

pytest.importorskip("IPython")
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from dplab.plots import TAKEAWAY_COLUMNS, takeaway  # noqa: E402


def shown(*args, **kwargs) -> list[dict]:
    """The display_data bundles that takeaway(...) publishes in an IPython shell."""
    InteractiveShell.instance()
    with capture_output() as out:
        takeaway(*args, **kwargs)
    assert out.stdout == "" and out.stderr == ""
    return [o.data for o in out.outputs]


def test_a_takeaway_is_one_box_in_html_with_a_plain_text_fallback():
    [bundle] = shown("The ring was 1.8 times faster <than> the tree & the naive.")
    assert set(bundle) == {"text/html", "text/plain"}
    page = bundle["text/html"]
    assert page.startswith('<div class="admonition dplab-takeaway" style="') and page.endswith("</div>")
    assert "border-left" in page and "On this machine" in page
    # the text is escaped, not markup: a measured value cannot break the page
    assert "1.8 times faster &lt;than&gt; the tree &amp; the naive." in page
    assert bundle["text/plain"] == "On this machine: The ring was 1.8 times faster <than> the tree & the naive."


def test_the_plain_text_fits_the_output_box():
    words = " ".join(["a per-message value of 12.3 ms"] * 12)
    [bundle] = shown(words, title="Here")
    lines = bundle["text/plain"].split("\n")
    assert len(lines) > 1 and max(map(len, lines)) <= TAKEAWAY_COLUMNS
    assert " ".join(lines) == "Here: " + words  # no word cut at its hyphen


@pytest.mark.parametrize("x, digits, text", [
    (45.3, 2, "45"), (0.0234, 2, "0.023"), (1234, 2, "1,200"), (9.96, 2, "10"),
    (1.067, 2, "1.1"), (61.80, 2, "62"), (0.000076, 1, "0.00008"), (-3.14159, 3, "-3.14"),
    (0, 2, "0"),
])
def test_rounded_keeps_significant_figures_without_an_exponent(x, digits, text):
    from dplab.plots import rounded

    assert rounded(x, digits) == text

