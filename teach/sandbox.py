"""A learner's kernel as an unprivileged account that sees none of the instructor's files.

`python -m teach.grade --sandbox` starts each notebook's kernel through this file: its
kernelspec's argv is `unshare --mount ... teach/sandbox.py kernel ...` (run by its path, so that
no folder a learner can write to is on root's module search path). Still root, in a mount
namespace of its own, the script
- mounts a fresh tmpfs on /tmp, where the run's own folder appears as /tmp/work and its home as
  /tmp/home, and on /dev/shm;
- hides the instructor's files under empty read-only tmpfs: root's home (but the Python
  installation the venv runs on), the repository's labs/, .git/ and _build/, and each --hide
  folder (the class: submissions, gradebook, reports);
- drops to ACCOUNT, with no groups, capabilities or way back (setpriv), and execs the kernel in
  /tmp/work/labs, with an environment of the DPLAB_* settings and what MPI and torch read.
The engines the kernel starts inherit all of it. The grader itself stays outside, as the caller:
learners' code can neither forge nor stop it, and it kills whatever the run left.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from booktools.pages import ROOT

ACCOUNT = "dplab-sandbox"  # not the hub tests' learner: they make and remove "dplab-learner"
SPOOL = Path("/var/tmp/dplab-grade")  # runs' folders: root's, mode 700; each run's, ACCOUNT's
HIDDEN = [ROOT / "labs", ROOT / ".git", ROOT / "_build"]  # the solutions and their history
KEEP_ENV = ("PATH", "JPY_PARENT_PID", "JPY_SESSION_NAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR", "ATEN_CPU_CAPABILITY")
KEEP_PREFIXES = ("DPLAB_", "SLURM_", "TORCH_", "NCCL_", "GLOO_")


def unavailable() -> str:
    """Why this machine cannot sandbox a run ('' if it can)."""
    if os.geteuid() != 0:
        return ("grading in a sandbox needs root (to switch to the unprivileged account "
                f"{ACCOUNT} and hide the instructor's files): run as root, or grade without it "
                "(teach.grade without --sandbox, teach.grade_class --no-sandbox), which runs learners' "
                "code as yourself")
    missing = [exe for exe in ("unshare", "setpriv", "mount", "useradd") if not shutil.which(exe)]
    if missing:
        return f"grading in a sandbox needs {', '.join(missing)} (Debian: apt-get install util-linux passwd)"
    return ""


def account() -> pwd.struct_passwd:
    """ACCOUNT, made on first use: a system account with no home, shell or password. Runs that
    start at once (a class's SLURM jobs on a new machine) may all try to make it: useradd fails
    for all but one (the name is taken, or /etc/passwd is locked), so each tries again, bounded."""
    for _ in range(20):
        try:
            return pwd.getpwnam(ACCOUNT)
        except KeyError:
            made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                   "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                                   ACCOUNT], capture_output=True, text=True)
            if made.returncode == 0:
                return pwd.getpwnam(ACCOUNT)
            said = made.stderr.strip()
            time.sleep(0.5)
    raise RuntimeError(f"could not make the sandbox's account {ACCOUNT}: useradd said {said!r}")


def new_run(notebook: Path, support: list[Path]) -> Path:
    """A fresh run folder in SPOOL, ACCOUNT's: labs/ with the notebook, and the other files the
    lab reads at the handout's places (chapters/ for Lab 5)."""
    SPOOL.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(SPOOL, 0o700)
    for old in SPOOL.glob("run-*-*"):  # a grader killed with SIGKILL could not remove its own
        pid = old.name.split("-")[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(old, ignore_errors=True)
    run = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=SPOOL))
    (run / "labs").mkdir()
    shutil.copyfile(notebook, run / "labs" / notebook.name)
    for path in support:
        target = run / path.relative_to(ROOT)
        if path.is_dir():
            shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    who = account()
    for folder, dirs, files in os.walk(run):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, who.pw_uid, who.pw_gid)
    os.chmod(run, 0o700)
    return run


def write_kernelspec(spec_dir: Path, run: Path, hide: list[Path]) -> str:
    """A kernelspec in spec_dir that starts the sandboxed kernel for `run`; its name."""
    name = "dplab-sandbox"
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, str(Path(__file__).resolve()),
            "kernel", "--run", str(run)]
    for path in hide:
        argv += ["--hide", str(Path(path).resolve())]
    (spec_dir / name).mkdir(parents=True, exist_ok=True)
    (spec_dir / name / "kernel.json").write_text(json.dumps({
        "argv": argv + ["{connection_file}"], "display_name": "Python 3 (grading sandbox)",
        "language": "python"}))
    return name


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def kernel(run: Path, hide: list[Path], connection_file: Path) -> None:
    """In the new mount namespace, as root: build the learner's view, then become ACCOUNT and
    exec the kernel (never returns)."""
    who = account()
    connection = connection_file.read_bytes()  # in root's runtime folder, hidden below
    # What the kernel runs on, if a mount below hides it: the Python installation, the venv,
    # and this repository (its kit). Held aside, in the run folder, until it is back in place.
    replaced = [Path("/tmp"), Path("/dev/shm"), Path.home().resolve(), *hide]
    needed = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), ROOT]
    needed = [p for p in needed if not any(p != q and p.is_relative_to(q) for q in needed)]
    kept = [p for p in dict.fromkeys(needed) if any(p.is_relative_to(r) for r in replaced)]
    aside = run / ".keep"
    for i, path in enumerate(kept):
        (aside / str(i)).mkdir(parents=True)
        mount("--bind", str(path), str(aside / str(i)))
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", "/tmp")
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", "/dev/shm")
    work, home = Path("/tmp/work"), Path("/tmp/home")
    for folder in (work, home):
        folder.mkdir()
    mount("--bind", str(run), str(work))
    hidden = [Path.home().resolve(), *hide]
    for path in hidden:
        if path.is_dir():
            mount("-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", str(path))
    for i, path in enumerate(kept):
        path.mkdir(parents=True, exist_ok=True)
        mount("--move", str(aside / str(i)), str(path))
        mount("-o", "remount,bind,ro", str(path))
    shutil.rmtree(aside)
    for path in HIDDEN:  # in this repository, where it is now
        if path.is_dir():
            mount("-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", str(path))
            mount("-o", "remount,ro", str(path))
    for path in hidden:
        if path.is_dir():
            mount("-o", "remount,ro", str(path))
    mine = work / ".connection.json"
    mine.write_bytes(connection)
    for path in (mine, home):
        os.chown(path, who.pw_uid, who.pw_gid)
    os.chmod(mine, 0o600)
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(KEEP_PREFIXES)}
    env.update(HOME=str(home), USER=ACCOUNT, LOGNAME=ACCOUNT, TMPDIR="/tmp")
    os.chdir(work / "labs")
    os.execvpe("setpriv", ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}",
                           "--clear-groups", "--no-new-privs", "--inh-caps=-all",
                           "--bounding-set=-all", sys.executable, "-m", "ipykernel_launcher",
                           "-f", str(mine)], env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    k = sub.add_parser("kernel", help="(the kernelspec's argv, under unshare --mount)")
    k.add_argument("--run", type=Path, required=True)
    k.add_argument("--hide", type=Path, action="append", default=[])
    k.add_argument("connection_file", type=Path)
    args = ap.parse_args()
    if unavailable():
        sys.exit(unavailable())
    kernel(args.run, args.hide, args.connection_file)
    return 1


if __name__ == "__main__":
    sys.exit(main())
