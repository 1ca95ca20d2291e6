"""Moved to teach/solutions.py: import teach.solutions. This alias keeps old imports working."""
from teach.solutions import *  # noqa: F401,F403
