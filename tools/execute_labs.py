"""Moved to booktools/store.py: `python -m booktools.store labs/*.ipynb` (make labs). This alias
runs it."""
import sys

from booktools.store import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
