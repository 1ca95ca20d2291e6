"""Sphinx extension for the book: number each page's exercises 1, 2, … on that page.

sphinx-exercise numbers exercises across the whole book (Lab 8's first would be Exercise 38);
the labs' check cells and the chapters' prose say "exercise 1" of their own page.
"""
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment


def number_per_page(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Renumber every page's exercises from 1, in page order; return the pages renumbered."""
    pages = []
    for docname, numbers in env.toc_fignumbers.items():
        if numbers.get("exercise"):
            numbers["exercise"] = {ids: (i,) for i, ids in enumerate(numbers["exercise"], start=1)}
            pages.append(docname)
    return pages


def setup(app: Sphinx) -> dict:
    # Sphinx's toctree collector numbers figures (and exercises) book-wide at priority 500.
    app.connect("env-get-updated", number_per_page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
