"""Print, as NAME==VERSION lines, the packages a GPU machine without network needs as wheels for
`make test-gpu` (tools/gpu_offline/run.sh): requirements.txt and what it pulls in, at the versions
this venv installed, less torch and its own needs (the machine's torch is used), less what only
the book and its tests use, less what the GPU image already has and is large (KINDS.md lists
the image's packages): the folder must travel with the working tree (the device tool's 64 MiB).

    python tools/gpu_offline/wheels.py > .whl/gpu/requirements.txt   # make gpu-wheels runs it
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Only the book, its nbval pass and its browser test use these.
BOOK_ONLY = {"jupyter-book", "jupyter-cache", "myst-nb", "nbval", "pytest", "sphinx-exercise", "playwright"}
#: In the GPU image ('cuda') and large: its own versions serve the labs' asserts (outputs are not compared).
IMAGE_HAS = {"numpy", "matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing",
             "scipy", "scikit-learn", "pandas", "joblib", "threadpoolctl", "psutil", "python-dateutil", "six",
             "packaging", "pytz", "tzdata", "setuptools"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needs(name: str) -> list[str]:
    """The packages `name` requires (no extras), as this Python would install them."""
    from packaging.requirements import Requirement

    out = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(norm(req.name))
    return out


def closure(roots: list[str], skip: set[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name in skip:
            continue
        seen.add(name)
        todo.extend(needs(name))
    return seen


def main() -> int:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    roots = [norm(re.split(r"[=<>!~; ]", line.strip())[0])
             for line in lines if line.strip() and not line.startswith("#")]
    roots += ["nbclient", "nbformat"]  # booktools.notebooks (ipykernel brings them in today)
    torch_side = closure(["torch"], set()) - {"numpy"}
    wanted = closure([r for r in roots if r not in BOOK_ONLY], torch_side | set(BOOK_ONLY) | IMAGE_HAS)
    for name in sorted(wanted):
        print(f"{name}=={metadata.version(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
