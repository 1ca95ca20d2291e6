"""Moved to teach/course.py: run `python -m teach.course`. This alias keeps the old command working."""
from teach.course import main

raise SystemExit(main())
