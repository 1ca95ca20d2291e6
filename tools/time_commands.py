"""Moved to booktools/commands.py: run `python -m booktools.commands`. This alias keeps the old
command working for a while."""
import sys

from booktools.commands import main

if __name__ == "__main__":
    sys.exit(main())
