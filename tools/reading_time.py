"""Moved to booktools/reading.py: run `python -m booktools.reading`. This alias keeps the old
command working for a while."""
import sys

from booktools.reading import main

if __name__ == "__main__":
    sys.exit(main())
