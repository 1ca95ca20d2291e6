"""Serve MathJax 3 from the book's own `_static`, so formulas render with no network.

`make setup` installs MathJax from npm into the venv (`<venv>/share/mathjax`); this
extension copies it into the build and points Sphinx's `mathjax_path` at the copy.
"""
import shutil
import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

ES5 = Path(sys.prefix) / "share" / "mathjax" / "node_modules" / "mathjax" / "es5"
TARGET = "mathjax"  # under _static
# Bundles and outputs the book does not load (it uses tex-chtml.js and what that loads lazily).
UNUSED = shutil.ignore_patterns("*svg*", "*mml-*", "*-full*", "node-main.js")


def use_local_mathjax(app: Sphinx, config: Config) -> None:
    """Stop the build when MathJax is missing; else load it from _static."""
    if not (ES5 / "tex-chtml.js").is_file():
        raise ConfigError(f"MathJax 3 is not installed in {ES5.parents[2]}: run `make setup`, "
                          "which installs it from npm, so that the book's formulas render offline")
    config.mathjax_path = f"{TARGET}/tex-chtml.js"


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Copy MathJax into the HTML build's _static."""
    if exception is None and app.builder.format == "html":
        shutil.copytree(ES5, Path(app.builder.outdir) / "_static" / TARGET, ignore=UNUSED,
                        dirs_exist_ok=True)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", use_local_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
