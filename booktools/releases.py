"""Releases of torch beside the venv (the condition `torch=X.Y.Z`), and the record of the passes
run on each (benchmarks/results/test_torch.txt, which the intro page shows).

    python -m booktools.releases 2.8.0     # installs it once, prints the folder: .torch/2.8.0
    python -m booktools.releases --ends    # CI's two ends: 2.8.0 2.15.0
    python -m booktools.releases --middle  # CI's middle release, picked by the tree
    python -m booktools.releases --all     # the newest patch of every supported minor release
    python -m booktools.releases --install 2.8.0 2.15.0 2.12.1   # each installed, two at a time

A release goes into .torch/X.Y.Z/ with `pip install --target`, once (a stamp file says it is
complete). PyPI's Linux wheel is the CUDA build: it imports and runs on a machine with no GPU,
its NVIDIA libraries included (about 6 GB for 2.8.0). The runner puts the folder first on
PYTHONPATH, which the notebook kernels and their engines inherit. A value that is not a release
number, or a release outside the range the book supports (dplab.compat), is refused before
anything is installed, with what to do.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from booktools.pages import ROOT
from dplab.compat import check_supported

FREE_GB = 10  # a CUDA build unpacks to 4-7 GB; pip also keeps the wheel while it installs
#: How long an install waits for another process's install of the same release to end (.ci/run
#: installs its releases beside make test's kit tests, and the lab pass may need one before then).
INSTALL_WAIT_S = 1800
RELEASES = ROOT / ".torch"
RESULTS = ROOT / "benchmarks" / "results" / "test_torch.txt"
RESULT_LINE = re.compile(r"^torch (?P<torch>\S+) on (?P<on>\S+): (?P<verdict>.+?) \| (?P<when>.+)$")
#: The newest patch of each minor release in the supported range, as PyPI lists them
#: (`pip index versions torch`, 2026-12-02): what make test-torch-all sweeps. A new patch or
#: minor release is one edit here (tests/test_releases.py
#: checks that the table spans dplab.compat's range, one entry per minor release).
NEWEST_PATCH = {"2.8": "2.8.0", "2.9": "2.9.1", "2.10": "2.10.0", "2.11": "2.11.0", "2.12": "2.12.1",
                "2.13": "2.13.0", "2.14": "2.14.1", "2.15": "2.15.0"}
#: The names of the records written before the runner (make test-torch's ON=), by the other
#: conditions of their pass.
RECORD_NAMES = {"": "this-cpu", "other-cpu,busy": "other-cpu", "two=3": "two-learners"}


def ends() -> tuple[str, str]:
    """The newest patches of the lowest and the newest supported minor releases: CI's two ends."""
    from dplab.compat import supported_range

    low, new = supported_range()
    return NEWEST_PATCH[low], NEWEST_PATCH[new]


def middle() -> str:
    """The release CI tests besides the two ends (make test-nbgrader TORCH=...), picked by a
    hash of the repository's tree (booktools.labs.by_tree): a given tree always tests the same
    one, and successive commits give every release between the ends its turn, the reference
    torch (the venv's, which stored the outputs) among them."""
    from booktools.labs import by_tree

    low, new = ends()
    return by_tree([v for v in NEWEST_PATCH.values() if v not in (low, new)], salt="torch")


def folder(version: str) -> Path:
    """Where the release lives: .torch/X.Y.Z/."""
    return RELEASES / version


def not_a_release(version: str) -> str | None:
    """Why `version` is not a release the book supports, said with what to do; None if it is one."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version or ""):
        return (f"torch={version}: not a release number. Name one, such as torch=2.8.0 "
                "(make test-torch TORCH=2.8.0; pypi.org/project/torch/#history lists them).")
    unsupported = check_supported(version)
    return f"torch={version}: {unsupported}" if unsupported else None


def problem(version: str, free_bytes: int) -> str | None:
    """Why `version` cannot be installed here, said with what to do; None if it can."""
    why = not_a_release(version)
    if why:
        return why
    if free_bytes < FREE_GB * 2**30:
        return (f"torch={version}: it needs about {FREE_GB} GB of free disk beside the venv, and "
                f"{free_bytes / 2**30:.1f} GB are free. Free some (rm -r .torch/ removes the releases "
                "installed before) and run it again.")
    return None


def installed(version: str) -> bool:
    return (folder(version) / ".installed").exists()


def in_venv(version: str) -> bool:
    """Whether the venv's own torch is this release (a local build tag aside, as 2.13.0+cpu):
    then nothing is installed and the venv's is used."""
    from importlib.metadata import PackageNotFoundError, version as installed_version

    try:
        return installed_version("torch").split("+")[0] == version
    except PackageNotFoundError:
        return False


def free_bytes() -> int:
    """Free disk where the releases go."""
    RELEASES.mkdir(exist_ok=True)
    return shutil.disk_usage(RELEASES).free


def install_command(version: str) -> tuple[list[str], dict[str, str]]:
    """pip's command and environment for installing `version` into its folder. No pip
    configuration file: a machine-wide one may cap torch (this CI image caps it at the release
    that lies on its disk) or point at local wheels. PyPI decides."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CONSTRAINT": ""}
    return ([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
             str(folder(version)), f"torch=={version}"], env)


@contextlib.contextmanager
def only_installer(version: str, say=print, wait_s: float = INSTALL_WAIT_S):
    """Held while this process installs `version`: a second process that installs it at the same
    time waits here (bounded) instead of removing the first one's half-unpacked folder, then finds
    it installed. The lock is the kernel's (flock on .torch/.X.Y.Z.lock), so it goes with its
    process, even one killed with SIGKILL."""
    RELEASES.mkdir(exist_ok=True)
    with open(RELEASES / f".{version}.lock", "w") as lock:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"torch={version}: another process has been installing it for over "
                                     f"{wait_s:g} s (.torch/.{version}.lock is held). Wait for it, or stop "
                                     "it, and run again.")
                if not told:
                    say(f"torch={version}: another process is installing it; waiting for that")
                    told = True
                time.sleep(0.5)
        yield


def install(version: str, say=print) -> Path:
    """The release's folder, installed there first if it is not; SystemExit if pip fails."""
    where = folder(version)
    if installed(version):
        return where
    with only_installer(version, say):
        if not installed(version):  # another process may have installed it while this one waited
            _install(version, where, say)
    return where


def _install(version: str, where: Path, say) -> None:
    shutil.rmtree(where, ignore_errors=True)  # a half-finished install
    RELEASES.mkdir(exist_ok=True)
    cmd, env = install_command(version)
    say(f"torch={version}: installing it into {where.relative_to(ROOT)}/")
    if subprocess.run(cmd, env=env).returncode != 0:
        shutil.rmtree(where, ignore_errors=True)
        raise SystemExit(f"torch={version}: pip could not install torch=={version} (above). Is it a "
                         "release on PyPI for this Python (pypi.org/project/torch/#history), and is "
                         "PyPI reachable?")
    (where / ".installed").touch()


def install_at_once(versions, say=print, at_once: int = 2) -> None:
    """Install the releases of `versions` that are missing, `at_once` at a time: a download and
    its unpacking keep about one core and the network busy (about 100 s each on a 2-core box),
    so two at once take little more than one. Only where the disk holds them all while they
    unpack; a release that fails is left for its pass's set-up, which installs it again and
    says why it cannot."""
    from concurrent.futures import ThreadPoolExecutor

    missing = [v for v in dict.fromkeys(versions) if not installed(v) and not in_venv(v)]
    workers = min(at_once, len(missing))
    if workers < 2 or free_bytes() < workers * FREE_GB * 2**30:
        return  # one, or no room for two: each pass's set-up installs its own

    def one(version: str) -> None:
        try:
            install(version, say)
        except SystemExit as e:
            say(str(e))

    say(f"installing {', '.join('torch=' + v for v in missing)}, {workers} at a time")
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, missing))


def imported_version(version: str) -> str:
    """The torch that Python imports with the release first on PYTHONPATH; SystemExit if it is
    not that release."""
    where = folder(version)
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         env={**os.environ, "PYTHONPATH": str(where)}, capture_output=True, text=True)
    found = out.stdout.strip()
    if out.returncode != 0 or found.split("+")[0] != version:
        raise SystemExit(f"torch={version}: {where} does not give torch {version} (got "
                         f"{found or out.stderr[-500:]}); remove it (rm -r {where}) and run again.")
    return found


def record_name(others: list[str]) -> str:
    """How the record names a pass by its conditions other than torch=: 'other-cpu'."""
    spec = ",".join(others)
    return RECORD_NAMES.get(spec, spec)


def record(version: str, on: str, verdict: str, results: Path = RESULTS) -> str:
    """Put the verdict of a pass on torch `version` in `results`, replacing the line of an earlier
    run of the same release and conditions; the line."""
    from datetime import datetime, timezone

    from dplab.timing import machine

    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    line = f"torch {version} on {on}: {verdict} | {datetime.now(timezone.utc):%Y-%m-%d}, {machine()}, {found.stdout.strip()}"
    kept = [old for old in (results.read_text().splitlines() if results.exists() else [])
            if not ((m := RESULT_LINE.match(old)) and (m["torch"], m["on"]) == (version, on))]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("\n".join(kept + [line]) + "\n")
    return line


def main(argv: list[str]) -> int:
    if argv in (["--ends"], ["--middle"], ["--all"]):
        picks = {"--ends": ends(), "--middle": (middle(),), "--all": tuple(NEWEST_PATCH.values())}
        print(*picks[argv[0]])
        return 0
    if argv[:1] == ["--install"] and argv[1:]:
        return install_each(argv[1:])
    if len(argv) != 1:
        print("usage: python -m booktools.releases X.Y.Z, or --install X.Y.Z ... (the runner's "
              "condition torch=X.Y.Z installs it by itself)", file=sys.stderr)
        return 2
    return install_each(argv)


def install_each(versions: list[str]) -> int:
    """Every release named (X.Y.Z, or --install's several), checked before any is installed,
    then installed, two at a time where several are missing (install_at_once); the venv's own
    release is not installed. 2 with what to do if one is refused, 1 if pip fails."""
    why = next((w for v in versions if (w := not_a_release(v))), None)
    missing = [] if why else [v for v in versions if not in_venv(v) and not installed(v)]
    why = why or (problem(missing[0], free_bytes() - (len(missing) - 1) * FREE_GB * 2**30)
                  if missing else None)
    if why:
        print(why, file=sys.stderr)
        return 2
    if len(missing) > 1:
        install_at_once(missing)
    try:
        for v in versions:
            if in_venv(v):
                print(f"torch {v} is the venv's own: nothing to install", flush=True)
                continue
            install(v)
            print(f"torch {imported_version(v)}, from {folder(v).relative_to(ROOT)}/", flush=True)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
