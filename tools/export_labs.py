"""Moved to booktools/export.py: run `python -m booktools.export`. This alias keeps the old
command working for a while."""
import sys

from booktools.export import main

if __name__ == "__main__":
    sys.exit(main())
