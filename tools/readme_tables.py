"""Moved to booktools/readme.py: run `python -m booktools.readme`. This alias keeps the old
command working for a while."""
import sys

from booktools.readme import main

if __name__ == "__main__":
    sys.exit(main())
