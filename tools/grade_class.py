"""Moved to teach/grade_class.py: run `python -m teach.grade_class`. This alias keeps the old command working."""
from teach.grade_class import main

raise SystemExit(main())
