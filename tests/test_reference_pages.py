"""The Reference part: every formula row links to its derivation and computes its example; every glossary term is used."""
import re

import pytest

from booktools.pages import ROOT, on_disk, page_at, toc

CHAPTERS = [p for p in on_disk() if p.name.startswith("chapters/") and p.path.stem not in ("formulas", "glossary")]
ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")
LINK = re.compile(r"\{(?:ref|numref|eq)\}`(?:[^`<]*<)?([\w-]+)>?`")
NAMES = re.compile(r"Lab \d|ZeRO-\d|[bf]p\d+|\d+-bit")  # names that contain digits, not numbers


def labels() -> set[str]:
    """Every target the book defines: (label)=, $$ (label), and :name:/name: of tables and figures."""
    found = set()
    for page in on_disk():
        if page.name == "intro":
            continue
        text = page.text.replace("\\n", "\n")
        for rx in (r"^\"?\(([\w-]+)\)=", r"\$\$ \(([\w-]+)\)", r"\bname: ([\w-]+)"):
            found |= set(re.findall(rx, text, re.M))
    return found


def formula_rows() -> list[list[str]]:
    """The list-table rows of the Formulas page after the header: [formula, meaning, derivation, example]."""
    rows = []
    for fence in page_at(ROOT / "chapters" / "formulas.md").fences:
        if fence.name != "list-table":
            continue
        table = "\n".join(fence.body) + "\n"
        for row in re.split(r"^\* ", table, flags=re.M)[2:]:  # [options, header, rows...]
            rows.append([c.strip() for c in re.split(r"^\s*- ", row, flags=re.M)[1:]])
    return rows


def glossary_terms() -> list[str]:
    [glossary] = [f for f in page_at(ROOT / "chapters" / "glossary.md").fences if f.name == "glossary"]
    return [line for _, line in glossary.content if line and not line.startswith(" ")]


def test_formula_rows_link_to_a_labelled_derivation_and_glue_their_example():
    rows, known = formula_rows(), labels()
    assert len(rows) > 20
    for formula, meaning, derivation, example in rows:
        targets = LINK.findall(derivation)
        assert targets and set(targets) <= known, f"{formula}: derivation {derivation!r} links to no label"
        if example.startswith("see the next row"):
            continue
        assert "{glue:text}" in example, f"{formula}: example without a computed number"
        bare = NAMES.sub("", re.sub(r"\$[^$]*\$", "", ROLE.sub("", example)))
        assert not re.search(r"\d", bare), f"{formula}: a typed number in the example {example!r}"


def test_every_glossary_term_is_linked_from_a_chapter_and_every_link_has_a_term():
    terms = {t.lower() for t in glossary_terms()}
    linked = set()
    for page in CHAPTERS:
        for target in re.findall(r"\{term\}`(?:[^`<]*<)?([^`<>]+)>?`", page.text):
            linked.add(target.strip().lower())
    assert sorted(terms - linked) == [], "glossary terms no chapter links with {term}"
    assert sorted(linked - terms) == [], "{term} links to words the glossary lacks"


@pytest.mark.parametrize("page", ["formulas", "glossary"])
def test_reference_pages_are_in_the_toc(page):
    assert f"chapters/{page}" in [p.name for p in toc()]
