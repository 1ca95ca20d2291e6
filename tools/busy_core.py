"""Moved to booktools/conditions.py, the condition `busy`: `python -m booktools.run --on busy`
(or `--on other-cpu,busy`: make test-labs-other-cpu) runs the labs beside one busy core."""
import sys

if __name__ == "__main__":
    sys.exit("busy_core.py: replaced by the condition busy of the runner: python -m booktools.run --on busy "
             "(make test-labs ON=busy; make test-labs-other-cpu is ON=other-cpu,busy)")
