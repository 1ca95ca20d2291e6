"""Moved to teach/sandbox.py: run `python -m teach.sandbox`. This alias keeps the old command working."""
from teach.sandbox import main

raise SystemExit(main())
