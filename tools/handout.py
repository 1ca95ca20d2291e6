"""Moved to teach/handout.py: import teach.handout (a course's nbgrader_config.py made before the
move imports Handout from here)."""
from teach.handout import *  # noqa: F401,F403
