"""Generated from chapters/collectives.md by tools/export_labs.py: do not edit.

Change the chapter, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np


# From chapters/collectives.md, section "The seven collectives".
def broadcast(xs, root=0):
    return [xs[root].copy() for _ in xs]


# From chapters/collectives.md, section "The seven collectives".
def scatter(blocks_at_root, p):
    return [blocks_at_root[r] for r in range(p)]


# From chapters/collectives.md, section "The seven collectives".
def gather(xs, root=0):
    return [np.stack(xs) if r == root else None for r in range(len(xs))]


# From chapters/collectives.md, section "The seven collectives".
def reduce(xs, root=0):
    return [np.sum(xs, axis=0) if r == root else None for r in range(len(xs))]


# From chapters/collectives.md, section "The seven collectives".
def all_gather(xs):
    return [np.stack(xs) for _ in xs]


# From chapters/collectives.md, section "The seven collectives".
def reduce_scatter(xs):
    total, p = np.sum(xs, axis=0), len(xs)
    return list(np.array_split(total, p))


# From chapters/collectives.md, section "The seven collectives".
def all_reduce(xs):
    return [np.sum(xs, axis=0) for _ in xs]
