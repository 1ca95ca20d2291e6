"""Moved to booktools/bookconfig.py: run `python -m booktools.bookconfig`. This alias keeps the old
command working for a while."""
import sys

from booktools.bookconfig import main

if __name__ == "__main__":
    sys.exit(main())
