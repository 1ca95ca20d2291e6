"""Moved to booktools/conditions.py, the condition `two`: `python -m booktools.run --on two=3`
runs the labs beside a second learner who runs every lab at p = 3 (make test-torch ON=two-learners)."""
import sys

if __name__ == "__main__":
    sys.exit("second_learner.py: replaced by the condition two of the runner: python -m booktools.run "
             "--on two (or two=N, or with others: torch=2.15.0,two=3; make test-labs ON=two=3)")
