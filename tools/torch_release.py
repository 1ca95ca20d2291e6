"""Install a release of torch beside the venv, for `make test-torch TORCH=X.Y.Z`.

    python tools/torch_release.py 2.8.0     # prints the folder: .torch/2.8.0
    python tools/torch_release.py --record 2.8.0 other-cpu LOG   # its line in test_torch.txt

The release goes into .torch/X.Y.Z/ with `pip install --target`, once (a stamp file says it is
complete). PyPI's Linux wheel is the CUDA build: it imports and runs on a machine with no GPU,
its NVIDIA libraries included (about 6 GB for 2.8.0). The Makefile puts the folder first on
PYTHONPATH, which the notebook kernels and their engines inherit. A value that is not a release
number, or a release outside the range the book supports, stops here before anything is
installed, with what to do.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from dplab.compat import check_supported  # noqa: E402

FREE_GB = 10  # a CUDA build unpacks to 4-7 GB; pip also keeps the wheel while it installs


def problem(version: str, free_bytes: int) -> str | None:
    """Why `version` cannot be installed here, said with what to do; None if it can."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version or ""):
        return (f"make test-torch: TORCH={version!r} is not a release number. Name one, such as "
                "make test-torch TORCH=2.8.0 (pypi.org/project/torch/#history lists them).")
    unsupported = check_supported(version)
    if unsupported:
        return f"make test-torch: {unsupported}"
    if free_bytes < FREE_GB * 2**30:
        return (f"make test-torch: torch {version} needs about {FREE_GB} GB of free disk beside the "
                f"venv, and {free_bytes / 2**30:.1f} GB are free. Free some (rm -r .torch/ removes "
                "the releases installed before) and run it again.")
    return None


def install(version: str) -> Path:
    folder = ROOT / ".torch" / version
    stamp = folder / ".installed"
    if stamp.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)  # a half-finished install
    folder.parent.mkdir(exist_ok=True)
    # No pip configuration file: a machine-wide one may cap torch (this CI image caps it at the
    # release that lies on its disk, 2.14.1) or point at local wheels. PyPI decides.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CONSTRAINT": ""}
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
           str(folder), f"torch=={version}"]
    print(f"make test-torch: installing torch {version} into {folder.relative_to(ROOT)}/", flush=True)
    if subprocess.run(cmd, env=env).returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        sys.exit(f"make test-torch: pip could not install torch=={version} (above). Is it a release "
                 "on PyPI for this Python (pypi.org/project/torch/#history), and is PyPI reachable?")
    stamp.touch()
    return folder


RESULTS = ROOT / "benchmarks" / "results" / "test_torch.txt"
RESULT_LINE = re.compile(r"^torch (?P<torch>\S+) on (?P<on>\S+): (?P<verdict>.+?) \| (?P<when>.+)$")


def record(version: str, on: str, log: Path) -> None:
    """Put nbval's verdict on this release (its last line in `log`) in RESULTS, replacing the
    line of an earlier run of the same release and CPU. The intro page glues them."""
    from datetime import datetime, timezone

    from dplab.timing import machine

    lines = log.read_text().splitlines()
    tail = [line for line in lines if re.search(r"\d+ (passed|failed).* in [\d.]+s", line)]
    verdict = re.sub(r"\x1b\[[0-9;]*m|=", "", tail[-1]).strip() if tail else "no verdict"
    # ON=two-learners: the second learner's verdict too (tools/second_learner.py)
    beside = [line for line in lines if re.match(r"second learner: \d+ passed, \d+ failed", line)]
    if beside:
        verdict += "; " + beside[-1]
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    when = f"{datetime.now(timezone.utc):%Y-%m-%d}, {machine()}, {found.stdout.strip()}"
    line = f"torch {version} on {on}: {verdict} | {when}"
    kept = [old for old in (RESULTS.read_text().splitlines() if RESULTS.exists() else [])
            if not ((m := RESULT_LINE.match(old)) and (m["torch"], m["on"]) == (version, on))]
    RESULTS.write_text("\n".join(kept + [line]) + "\n")
    print(f"make test-torch: {RESULTS.relative_to(ROOT)}: {line}")


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "--record":
        record(argv[1], argv[2], Path(argv[3]))
        return 0
    if len(argv) != 1:
        print("usage: make test-torch TORCH=X.Y.Z", file=sys.stderr)
        return 2
    version = argv[0]
    ROOT.joinpath(".torch").mkdir(exist_ok=True)
    why = problem(version, shutil.disk_usage(ROOT / ".torch").free)
    if why:
        print(why, file=sys.stderr)
        return 2
    folder = install(version)
    # The folder must hold the torch that Python then imports, not the venv's.
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         env={**os.environ, "PYTHONPATH": str(folder)}, capture_output=True, text=True)
    found = out.stdout.strip()
    if out.returncode != 0 or found.split("+")[0] != version:
        print(f"make test-torch: {folder} does not give torch {version} (got {found or out.stderr[-500:]}); "
              f"remove it (rm -r {folder}) and run again.", file=sys.stderr)
        return 1
    print(f"make test-torch: torch {found}, from {folder.relative_to(ROOT)}/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
