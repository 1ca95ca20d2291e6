"""Each lab's own facts, kept in its notebook's metadata under "dplab", and read here only.

    "dplab": {
      "reads": ["chapters/ddp_train.py"],          files outside labs/ the lab opens
      "depends": {"lab2-check-x": "lab2-step"},    a check's solution cell, where its name is not
                                                   the check's with "-check" taken out
      "mistakes": {"name": {"cell": grade_id, "old": text, "new": text,
                            "fails": [grade_id, ...]}},
                                                   plausible mistakes, and the checks each fails
      "tied": [{"phrase": regex, "holds": expression}]
                                                   numbers the lab's prose restates from code
      "timing_mistakes": {"name": {"old": text, "new": text, "fails": check}}
                                                   a mistake that only a timing check catches:
                                                   `old` replaced by `new` in the lab's code;
                                                   the check (dplab.timing.in_band's name)
                                                   whose band it must leave, under any load
                                                   (python -m booktools.run --broken NAME)
      "proves": "MyST text"                        what the lab proves: its row of the landing
                                                   page's table (`landing_table`)
    }

Adding a lab is its notebook and its line in _toc.yml: every tool finds it through `labs()`.
`python -m booktools.store` then records its time (benchmarks/results/lab_times.json).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from booktools.pages import ROOT, toc

KEYS = ("reads", "depends", "mistakes", "tied", "proves", "timing_mistakes")


@dataclass(frozen=True)
class Mistake:
    """A plausible mistake: `old` replaced by `new` in the solution cell `cell`; the checks
    that must fail, and only those."""

    name: str
    cell: str
    old: str
    new: str
    fails: tuple[str, ...]


@dataclass(frozen=True)
class TimingMistake:
    """A mistake that only a timing check can catch: `old` replaced by `new` in the lab's code
    cells (once in all), and the check, by its in_band name, whose band it leaves."""

    name: str
    old: str
    new: str
    fails: str


@dataclass(frozen=True)
class Lab:
    """A lab: its notebook and its facts."""

    path: Path
    reads: tuple[str, ...] = ()
    depends: dict[str, str] = field(default_factory=dict)
    mistakes: tuple[Mistake, ...] = ()
    tied: tuple[tuple[str, str], ...] = ()
    proves: str = ""
    timing_mistakes: tuple[TimingMistake, ...] = ()

    @property
    def name(self) -> str:
        """The notebook's file name: 04_ddp.ipynb."""
        return self.path.name

    @property
    def stem(self) -> str:
        """04_ddp."""
        return self.path.stem

    @property
    def number(self) -> int:
        return int(self.stem[:2])

    def solution_of(self, check: str) -> str:
        """The solution cell a graded check depends on."""
        return self.depends.get(check, check.replace("-check-", "-", 1))


def facts(path: Path) -> Lab:
    """The lab at `path` with the facts its metadata holds; ValueError, naming the lab, on an
    unknown key or a malformed entry."""
    meta = json.loads(Path(path).read_text())["metadata"].get("dplab", {})
    unknown = sorted(set(meta) - set(KEYS))
    if unknown:
        raise ValueError(f"{Path(path).name}: unknown keys {unknown} in its metadata's \"dplab\" "
                         f"(known: {', '.join(KEYS)})")
    try:
        mistakes = tuple(Mistake(name, m["cell"], m["old"], m["new"], tuple(m["fails"]))
                         for name, m in meta.get("mistakes", {}).items())
        tied = tuple((t["phrase"], t["holds"]) for t in meta.get("tied", []))
        slow = tuple(TimingMistake(name, m["old"], m["new"], m["fails"])
                     for name, m in meta.get("timing_mistakes", {}).items())
    except (KeyError, TypeError) as e:
        raise ValueError(f"{Path(path).name}: a malformed mistake or tied entry in its metadata ({e})")
    return Lab(Path(path), tuple(meta.get("reads", [])), dict(meta.get("depends", {})), mistakes,
               tied, str(meta.get("proves", "")).strip(), slow)


def labs(root: Path = ROOT) -> list[Lab]:
    """Every lab of the book, in reading order (_toc.yml)."""
    return [facts(page.path) for page in toc(root) if page.is_lab]


def landing_table(seconds: dict[str, float], root: Path = ROOT) -> str:
    """The landing page's table, in MyST: each lab of _toc.yml, what it proves (its metadata's
    "proves") and its minutes from `seconds` (lab_times.json's, by stem). ValueError,
    naming the lab, where either is missing."""
    rows = ["| lab | what it proves | minutes |", "|---|---|---|"]
    for found in labs(root):
        if not found.proves:
            raise ValueError(f"{found.name}: no \"proves\" in its metadata's \"dplab\": say in one "
                             "sentence what the lab proves (the landing page's table shows it)")
        if found.stem not in seconds:
            raise ValueError(f"{found.name}: no time in lab_times.json: run python -m booktools.store "
                             f"labs/{found.name}")
        rows.append(f"| {{ref}}`lab-{found.number}` | {found.proves} | {seconds[found.stem] / 60:.1f} |")
    return "\n".join(rows)


def lab(name: str, root: Path = ROOT) -> Lab:
    """The lab named by its stem, its file name or its two-digit number."""
    for found in labs(root):
        if name in (found.stem, found.name, found.stem[:2]):
            return found
    raise KeyError(f"no lab {name!r} in _toc.yml")


def chosen(spec: str, root: Path = ROOT) -> list[Lab]:
    """The labs a spec names: 'all', or numbers such as '02,06'. ValueError on a number no lab has."""
    every = labs(root)
    if spec.strip() in ("", "all"):
        return every
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    missing = [w for w in wanted if not any(x.stem[:2] == w.zfill(2) for x in every)]
    if missing:
        raise ValueError(f"no lab numbered {', '.join(missing)}: the labs are "
                         f"{', '.join(x.stem[:2] for x in every)}")
    return [x for x in every if x.stem[:2] in {w.zfill(2) for w in wanted}]


def _tree_digest(salt: str, root: Path) -> "hashlib._Hash":
    """A hash of the repository's tree (`git rev-parse HEAD^{tree}`; without git, of the labs'
    bytes) and `salt`."""
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD^{tree}"],
                              capture_output=True, text=True, timeout=30)
        tree = done.stdout.strip() if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        tree = ""
    digest = hashlib.sha256(tree.encode() or b"".join(lab.path.read_bytes() for lab in labs(root)))
    digest.update(salt.encode())
    return digest


def by_tree(items: list, salt: str = "", root: Path = ROOT):
    """One of `items`, picked by a hash of the repository's tree (`git rev-parse HEAD^{tree}`;
    without git, of the labs' bytes) and `salt`: the same tree always picks the same item, and
    successive commits rotate through them; two salts pick independently."""
    if not items:
        raise ValueError("by_tree: nothing to pick from")
    digest = _tree_digest(salt, root)
    return items[int.from_bytes(digest.digest()[:8], "big") % len(items)]


def in_tree_order(items: list[str], salt: str = "", root: Path = ROOT) -> list[str]:
    """`items` (strings) in an order fixed by the repository's tree and `salt`, as by_tree
    picks: the same tree, the same order; a new tree, a new one."""
    seed = _tree_digest(salt, root).digest()
    return sorted(items, key=lambda item: hashlib.sha256(seed + item.encode()).digest())
