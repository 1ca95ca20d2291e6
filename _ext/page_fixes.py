"""Fixes to what the theme and its extensions put in every page, so pages log no errors.

- sphinx-thebe adds its inline configuration script twice (two `const THEBE_JS_URL`: a
  SyntaxError on every page); each script is kept once.
- The theme's colour mode is empty unless set, and its script logs an error; it is `auto`.
"""
from sphinx.application import Sphinx
from sphinx.config import Config


def default_mode(app: Sphinx, config: Config) -> None:
    """Give pydata-sphinx-theme's colour mode (a template variable) its documented default."""
    config.html_context.setdefault("default_mode", "auto")


def scripts_once(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Drop repeated scripts (same file or same inline body) from a page."""
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        # an inline script's filename is None or "", depending on how it was added
        key = (getattr(script, "filename", str(script)) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", default_mode)
    app.connect("html-page-context", scripts_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
