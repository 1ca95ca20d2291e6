"""The book's pages, in reading order: the one reader of _toc.yml.

(The page model grows here: each page's prose, fences, code cells and outputs, which every
page rule walks.)"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Page:
    """One page of the book: its name in _toc.yml (labs/04_ddp), its file and its part's caption."""

    name: str
    path: Path
    part: str

    @property
    def is_lab(self) -> bool:
        return self.name.startswith("labs/")


def toc(root: Path = ROOT) -> list[Page]:
    """Every page of _toc.yml, in reading order: the root page (intro) first."""
    import yaml

    data = yaml.safe_load((root / "_toc.yml").read_text())

    def page(name: str, part: str) -> Page:
        suffix = ".ipynb" if name.startswith("labs/") else ".md"
        return Page(name, root / f"{name}{suffix}", part)

    return [page(data["root"], "")] + [page(c["file"], part["caption"]) for part in data["parts"]
                                       for c in part["chapters"]]
