"""Moved to teach/student.py: run `python -m teach.student`. This alias keeps the old command working."""
from teach.student import main

raise SystemExit(main())
