"""A learner's kernel as an unprivileged account that sees none of the instructor's files, and
none of the runs graded beside it.

`python -m teach.grade --sandbox` starts each notebook's kernel through this file: its
kernelspec's argv is `unshare --mount --pid --net --ipc ... teach/sandbox.py kernel ...` (run by
its path, so that no folder a learner can write to is on root's module search path). Each run
is a world of its own:
- an account of its own, leased from a pool (ACCOUNT-0, ACCOUNT-1, ...: `lease`), so that runs
  graded at once cannot read, write or signal each other's files and processes;
- a PID namespace, with its own /proc: the run sees only its own processes, and when its kernel
  ends, everything it started ends with it (this script is the namespace's first process, and
  inherits the orphans of a fork away, which the grader sees and scores as a failure:
  booktools.notebooks.forked_away);
- a network namespace with only its own loopback: the run's engines talk to each other, and
  nothing else on the node (other runs' controllers, whatever listens there) is reachable. The
  grader reaches the kernel over IPC sockets in the run's folder;
- an IPC namespace, and fresh, size-bounded tmpfs on /tmp (where the run's own folder appears as
  /tmp/work and its home as /tmp/home), /var/tmp, /dev/shm and /run/lock, gone with the run;
- a bound on its processes and threads (RLIMIT_NPROC, per account), and on its memory, every
  process and tmpfs page of it together (a cgroup of its account's, MEMORY bytes unless the
  grader says otherwise: `memory_bound`). A run past it has a process killed by the kernel's
  OOM killer, and its report says so (`killed_for_memory`).
Still root, in those namespaces, the script also hides the instructor's files under empty
read-only tmpfs: root's home (but the Python installation the venv runs on), the repository's
labs/, .git/ and _build/, and each --hide folder (the class: submissions, gradebook, reports);
then it drops to the run's account, with no groups, capabilities or way back (setpriv), and
starts the kernel in /tmp/work/labs, with an environment of the DPLAB_* settings and what MPI
and torch read. The grader itself stays outside, as the caller: learners' code can neither
forge nor stop it, and it kills whatever the run left.
What this does not protect against is in the README ("Grading: what the sandbox protects").
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from booktools.pages import ROOT

ACCOUNT = "dplab-sandbox"  # not the hub tests' learner: they make and remove "dplab-learner"
POOL = 16  # accounts ACCOUNT-0 .. ACCOUNT-15: at most this many runs graded at once on a node
NPROC = 4096  # processes and threads of one run's account (a kernel and 8 engines use ~300)
TMPFS = {"/tmp": "1g", "/var/tmp": "256m", "/dev/shm": "1g", "/run/lock": "1m"}  # a run's own
MEMORY = 8 * 2**30  # a run's memory, all its processes and tmpfs pages (Lab 6 at p = 8 uses ~4 GiB)
SPOOL = Path("/var/tmp/dplab-grade")  # runs' folders: root's, mode 700; each run's, ACCOUNT's
HIDDEN = [ROOT / "labs", ROOT / ".git", ROOT / "_build"]  # the solutions and their history
# Not JPY_PARENT_PID: the kernel's parent is this script, the first process of its namespace, and
# ipykernel takes a parent of pid 1 for a dead one; the kernel ends with the namespace anyway.
KEEP_ENV = ("PATH", "JPY_SESSION_NAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
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


def account(name: str) -> pwd.struct_passwd:
    """The account `name`, made on first use: a system account with no home, shell or password.
    Runs that start at once (a class's SLURM jobs on a new machine) may all try to make it:
    useradd fails for all but one (the name is taken, or /etc/passwd is locked), so each tries
    again, bounded."""
    said = ""
    for _ in range(40):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                   "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                                   name], capture_output=True, text=True)
            if made.returncode == 0:
                return pwd.getpwnam(name)
            said = made.stderr.strip()
            time.sleep(0.5)
    raise RuntimeError(f"could not make the sandbox's account {name}: useradd said {said!r}")


def accounts(n: int) -> list[str]:
    """The first n accounts of the pool, made now where missing (before a class's jobs start)."""
    names = [f"{ACCOUNT}-{i}" for i in range(min(n, POOL))]
    for name in names:
        account(name)
    return names


@contextlib.contextmanager
def lease():
    """An account of the pool that no other run on this machine holds, for as long as the
    `with` block runs (a lock file in SPOOL, which the kernel dies with: a grader killed with
    SIGKILL frees its account)."""
    SPOOL.mkdir(mode=0o700, parents=True, exist_ok=True)
    for i in range(POOL):
        lock = open(SPOOL / f"account-{i}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        name = f"{ACCOUNT}-{i}"
        try:
            account(name)
            _end_processes_of(name)  # a run killed with its grader may have left some
            yield name
        finally:
            _end_processes_of(name)
            _remove_group(memory_group(name))
            lock.close()
        return
    raise RuntimeError(f"all {POOL} sandbox accounts are in use on this machine: grade fewer "
                       "notebooks at once here (fewer SLURM jobs per node)")


# -- the run's memory: a cgroup of its account's ------------------------------------------

def _memory_root() -> tuple[Path, str] | None:
    """The memory controller's hierarchy and its version ('v1' or 'v2'), or None."""
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists():
        return v1, "v1"
    v2 = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError):
        if "memory" in (v2 / "cgroup.controllers").read_text().split():
            if "memory" not in (v2 / "cgroup.subtree_control").read_text().split():
                (v2 / "cgroup.subtree_control").write_text("+memory")
            return v2, "v2"
    return None


def memory_group(who: str) -> Path | None:
    """The cgroup that bounds the memory of account `who`'s runs (None: no memory controller)."""
    root = _memory_root()
    return root[0] / who if root else None


def memory_bound(who: str, limit: int) -> Path | None:
    """Make `who`'s cgroup afresh with a bound of `limit` bytes (no swap beyond it); its folder,
    which the run's first process joins (`kernel --cgroup`). None, with a warning on stderr, on
    a machine with no memory controller, or whose cgroups root may not write: the run is then
    not bounded, and graded all the same."""
    root = _memory_root()
    if root is None:
        print("teach.sandbox: this machine has no cgroup memory controller: the run's memory is "
              "not bounded", file=sys.stderr)
        return None
    group = root[0] / who  # memory_group(who)
    try:
        _remove_group(group)
        group.mkdir()
        if root[1] == "v1":
            (group / "memory.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):  # only where swap accounting is on
                (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
        else:
            (group / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
    except OSError as e:  # a cgroup file system this machine does not let root write
        print(f"teach.sandbox: could not make the cgroup {group} ({e}): the run's memory is not "
              "bounded", file=sys.stderr)
        _remove_group(group)
        return None
    return group


def killed_for_memory(group: Path | None) -> int:
    """How many processes of the run the OOM killer ended at its bound."""
    for name in ("memory.oom_control", "memory.events"):  # v1, v2
        with contextlib.suppress(OSError):
            for line in (group / name).read_text().splitlines() if group else []:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def join_group(group: Path) -> None:
    """This process (and what it starts from now on) into `group`."""
    (group / "cgroup.procs").write_text("0")


def _remove_group(group: Path | None) -> None:
    """Remove the cgroup once its processes have left it (they are ending: bounded)."""
    for _ in range(100):
        if group is None or not group.exists():
            return
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    # the next run of this account makes it afresh; a grading is not failed for it
    print(f"teach.sandbox: the run's cgroup {group} still has processes, so it stays", file=sys.stderr)


def _end_processes_of(name: str) -> None:
    import psutil

    from dplab.cluster.processes import reap

    uid = pwd.getpwnam(name).pw_uid
    reap([p for p in psutil.process_iter(["uids"])
          if p.info["uids"] and p.info["uids"].real == uid], 0)


def new_run(notebook: Path, support: list[Path], who: str) -> Path:
    """A fresh run folder in SPOOL, account `who`'s: labs/ with the notebook, the other files the
    lab reads at the handout's places (chapters/ for Lab 5), and ipc/, where the kernel's
    sockets will be."""
    SPOOL.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(SPOOL, 0o700)
    for old in SPOOL.glob("run-*-*"):  # a grader killed with SIGKILL could not remove its own
        pid = old.name.split("-")[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(old, ignore_errors=True)
    run = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=SPOOL))
    (run / "labs").mkdir()
    (run / "ipc").mkdir()
    shutil.copyfile(notebook, run / "labs" / notebook.name)
    for path in support:
        target = run / path.relative_to(ROOT)
        if path.is_dir():
            shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    user = account(who)
    for folder, dirs, files in os.walk(run):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, user.pw_uid, user.pw_gid)
    os.chmod(run, 0o700)
    os.chmod(run / "ipc", 0o700)
    return run


def ipc_prefix(run: Path) -> str:
    """The path prefix of the kernel's IPC sockets (jupyter_client's `ip` with transport ipc)."""
    return str(run / "ipc" / "kernel")


def write_kernelspec(spec_dir: Path, run: Path, hide: list[Path], who: str,
                     group: Path | None = None) -> str:
    """A kernelspec in spec_dir that starts the sandboxed kernel for `run`, as account `who`; its
    name. unshare makes the namespaces and forks this script as the PID namespace's first
    process (--kill-child: it dies with unshare, even by SIGKILL, and everything with it)."""
    name = "dplab-sandbox"
    argv = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
            "--mount-proc", "--net", "--ipc", sys.executable, str(Path(__file__).resolve()),
            "kernel", "--run", str(run), "--account", who]
    for path in hide:
        argv += ["--hide", str(Path(path).resolve())]
    if group is not None:
        argv += ["--cgroup", str(group)]
    (spec_dir / name).mkdir(parents=True, exist_ok=True)
    (spec_dir / name / "kernel.json").write_text(json.dumps({
        "argv": argv + ["{connection_file}"], "display_name": "Python 3 (grading sandbox)",
        "language": "python"}))
    return name


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def loopback_up() -> None:
    """Bring this network namespace's loopback interface up (it starts down)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, siocgifflags, request))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def kernel(run: Path, hide: list[Path], connection_file: Path, who: str, group: Path | None = None) -> int:
    """In the new namespaces, as root and as their first process: build the learner's view,
    then start the kernel as account `who` and wait for it, reaping whatever else ends; the
    kernel's exit status (when this process ends, every process left in the namespace ends)."""
    user = account(who)
    if group is not None:
        join_group(group)  # first: everything the run starts is bounded with it
    connection = connection_file.read_bytes()  # in root's runtime folder, hidden below
    loopback_up()
    # What the kernel runs on, if a mount below hides it: the Python installation, the venv,
    # and this repository (its kit); and the run's own folder. Held aside in /run, which no
    # mount below replaces, until they are back in place.
    replaced = [*(Path(t) for t in TMPFS), Path.home().resolve(), *hide]
    needed = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), ROOT]
    needed = [p for p in needed if not any(p != q and p.is_relative_to(q) for q in needed)]
    kept = [p for p in dict.fromkeys(needed) if any(p.is_relative_to(r) for r in replaced)]
    aside = Path(tempfile.mkdtemp(prefix="dplab-sandbox-", dir="/run"))
    (aside / "run").mkdir()
    mount("--bind", str(run), str(aside / "run"))
    for i, path in enumerate(kept):
        (aside / str(i)).mkdir()
        mount("--bind", str(path), str(aside / str(i)))
    for where, size in TMPFS.items():
        if Path(where).is_dir():
            mount("-t", "tmpfs", "-o", f"mode=1777,nosuid,nodev,size={size}", "tmpfs", where)
    work, home = Path("/tmp/work"), Path("/tmp/home")
    for folder in (work, home):
        folder.mkdir()
    mount("--bind", str(aside / "run"), str(work))
    hidden = [Path.home().resolve(), *hide]
    for path in hidden:
        if path.is_dir():
            mount("-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", str(path))
    for i, path in enumerate(kept):
        path.mkdir(parents=True, exist_ok=True)
        mount("--move", str(aside / str(i)), str(path))
        mount("-o", "remount,bind,ro", str(path))
    # the kernel's sockets, where the grader's connection file says they are
    ipc = Path(ipc_prefix(run)).parent
    ipc.mkdir(parents=True, exist_ok=True)
    mount("--bind", str(work / "ipc"), str(ipc))
    subprocess.run(["umount", str(aside / "run")], check=True)
    for folder in aside.iterdir():  # empty now; rmdir, never rmtree: a mount left would be emptied
        folder.rmdir()
    aside.rmdir()
    for path in HIDDEN:  # in this repository, where it is now
        if path.is_dir():
            mount("-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", str(path))
            mount("-o", "remount,ro", str(path))
    for path in hidden:
        if path.is_dir():
            mount("-o", "remount,ro", str(path))
    # this machine's name means the loopback here: MPI's launcher connects to it
    hosts = work / ".hosts"
    hosts.write_text(f"127.0.0.1 localhost {socket.gethostname()}\n::1 localhost\n")
    mount("--bind", str(hosts), "/etc/hosts")
    mine = work / ".connection.json"
    mine.write_bytes(connection)
    for path in (mine, home):
        os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(mine, 0o600)
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(KEEP_PREFIXES)}
    env.update(HOME=str(home), USER=user.pw_name, LOGNAME=user.pw_name, TMPDIR="/tmp")
    os.chdir(work / "labs")
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))  # counted per account
    child = os.fork()
    if child == 0:
        os.execvpe("setpriv", ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                               "--clear-groups", "--no-new-privs", "--inh-caps=-all",
                               "--bounding-set=-all", sys.executable, "-m", "ipykernel_launcher",
                               "-f", str(mine)], env)
    # The first process of the namespace: the kernel gets the interrupts; this one reaps.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGTERM))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    k = sub.add_parser("kernel", help="(the kernelspec's argv, under unshare --mount)")
    k.add_argument("--run", type=Path, required=True)
    k.add_argument("--hide", type=Path, action="append", default=[])
    k.add_argument("--account", required=True)
    k.add_argument("--cgroup", type=Path, help="the cgroup that bounds the run's memory (memory_bound)")
    k.add_argument("connection_file", type=Path)
    args = ap.parse_args()
    if unavailable():
        sys.exit(unavailable())
    return kernel(args.run, args.hide, args.connection_file, args.account, args.cgroup)


if __name__ == "__main__":
    sys.exit(main())
