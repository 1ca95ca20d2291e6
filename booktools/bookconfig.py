"""Write a copy of _config.yml for `make test`: labs render their stored outputs, chapters execute.

    python -m booktools.bookconfig _config.yml _build/_config_test.yml
"""
from __future__ import annotations

import os
import sys

import yaml


def config_for_tests(src: str, dst: str) -> dict:
    """The book's config at `src`, made to execute the chapters only, for a file at `dst`."""
    with open(src) as f:
        cfg = yaml.safe_load(f)
    execute = cfg.setdefault("execute", {})
    execute["execute_notebooks"] = "force"
    execute["exclude_patterns"] = list(execute.get("exclude_patterns", [])) + ["labs/*"]
    # Jupyter Book finds local extensions relative to the config file, which moves to dst's folder.
    extensions = cfg.get("sphinx", {}).get("local_extensions") or {}
    for name, path in extensions.items():
        extensions[name] = os.path.relpath(os.path.join(os.path.dirname(src), path), os.path.dirname(dst))
    return cfg


def main(argv: list[str] | None = None) -> int:
    src, dst = (sys.argv[1:] if argv is None else argv)[:2]
    cfg = config_for_tests(src, dst)
    with open(dst, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
