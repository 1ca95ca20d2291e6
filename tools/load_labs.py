"""Moved to booktools/run.py: `python -m booktools.run --on "quiet quiet quiet busy two p=2 p=6"
--labs timing` (make test-load). This alias maps --conditions (quiet1, quiet2, quiet3: quiet) to it."""
import re
import sys

from booktools.run import main


def alias(args: list[str]) -> int:
    at = args.index("--conditions") if "--conditions" in args else len(args)
    on = [re.sub(r"^quiet\d$", "quiet", c) for c in args[at + 1:]] or "quiet quiet quiet busy two p=2 p=6".split()
    return main([*args[:at], *([] if args[:at] else ["--labs", "timing"]), "--on", " ".join(on)])


if __name__ == "__main__":
    sys.exit(alias(sys.argv[1:]))
