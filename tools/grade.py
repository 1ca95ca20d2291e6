"""Moved to teach/grade.py: run `python -m teach.grade`. This alias keeps the old command working."""
from teach.grade import main

raise SystemExit(main())
