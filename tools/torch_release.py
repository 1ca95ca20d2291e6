"""Moved to booktools/releases.py: `python -m booktools.releases X.Y.Z` installs a release beside
the venv, and `python -m booktools.run --on torch=X.Y.Z --record FILE` runs the labs on it and
records the verdict (make test-torch). RESULTS and RESULT_LINE stay here for the intro page."""
import sys

from booktools.releases import RESULT_LINE, RESULTS, main  # noqa: F401

if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        sys.exit("torch_release.py --record: the runner records now: python -m booktools.run "
                 "--on torch=X.Y.Z --record benchmarks/results/test_torch.txt (make test-torch RECORD=1)")
    sys.exit(main(sys.argv[1:]))
