"""A dead kernel's cluster goes away by itself (dplab.cluster.guard).

Each learner is a real ipykernel started by jupyter_client, as JupyterLab starts one, that
starts a cluster. The tests end one kernel's process and nothing else (the server, here pytest,
goes on): by SIGKILL, as the OOM killer does, or by SIGTERM, as a culler may. Within LIMIT_S
every process of that kernel's cluster (the controller and its schedulers, mpiexec, hydra's
proxy, the engines), its guardian, MPICH's files in /dev/shm and ipyparallel's files that name
the cluster must be gone, while another learner's cluster on the same node goes on working.
The SLURM launcher's counterpart is in tests/slurm/test_slurm.py (make test-slurm).
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import dplab
from tests.support.kernels import Learner, run, running

LIMIT_S = 10  # issue 28: everything of the cluster is gone within 10 s of the kernel's death


@pytest.fixture
def learners(leaves_nothing):
    """Start learners' kernels; shut them down, and kill what is left of their clusters, at the end."""
    started = []

    def start() -> Learner:
        started.append(Learner())
        return started[-1]

    yield start
    for learner in started:
        learner.close()


def test_a_killed_kernels_cluster_goes_and_another_learners_cluster_stays(learners):
    mine, other = learners(), learners()
    mine.start("dplab.start_cluster(2)")
    other.start("dplab.start_cluster(2)")
    os.kill(mine.kernel.pid, signal.SIGKILL)
    seconds = mine.gone_within(LIMIT_S)
    print(f"\nkernel SIGKILLed: its cluster gone {seconds:.1f} s later")
    ended = [p.pid for p in other.processes + other.guardians if not running([p])]
    assert ended == [], f"the other learner's processes {ended} were ended too"
    out = run(other.kc, "c.view.execute('import torch, torch.distributed as dist\\n"
                        "s = torch.ones(1); dist.all_reduce(s)')\nprint([t.item() for t in c.view['s']])")
    assert out.strip() == "[2.0, 2.0]"
    run(other.kc, "c.stop()")  # a cluster stopped as usual leaves nothing either, and dismisses its guardian
    assert other.left() == [] and running(other.kernel.children()) == []


def test_a_terminated_kernels_cluster_of_four_engines_goes(learners):
    mine = learners()
    mine.start("dplab.start_cluster(4)")
    os.kill(mine.kernel.pid, signal.SIGTERM)
    seconds = mine.gone_within(LIMIT_S)
    print(f"\nkernel SIGTERMed: its cluster of 4 engines gone {seconds:.1f} s later")


def test_a_cluster_whose_guardian_cannot_start_does_not_start(monkeypatch, leaves_nothing):
    from dplab.cluster import guard

    monkeypatch.setattr(guard, "MAIN", "raise SystemExit('no guardian today')")
    with pytest.raises(dplab.ClusterError, match="guardian .* did not start: no guardian today"):
        dplab.start_cluster(2, init_torch=False)


# -- the guardian alone, on stand-in processes (no MPI, no kernel) --------------------------

def test_a_dismissed_guardian_exits_without_the_interpreters_teardown(monkeypatch, tmp_path):
    """Every Cluster.stop waits for its guardian to exit: the guardian skips Python's teardown
    (atexit hooks, then ipyparallel's and zmq's modules), which took a few tenths of a second."""
    from dplab.cluster import guard

    torn_down = tmp_path / "torn-down"
    monkeypatch.setattr(guard, "MAIN", f"import atexit; atexit.register(open, {str(torn_down)!r}, 'w'); {guard.MAIN}")
    guardian = guard.Guard("guard-test-teardown")
    guardian.wait_ready()
    t0 = time.monotonic()
    guardian.dismiss()
    print(f"\nthe guardian exited {time.monotonic() - t0:.2f} s after it was dismissed")
    assert guardian.process.returncode == 0 and not torn_down.exists()


GUARDED = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from dplab.cluster.guard import Guard

    how, folder = sys.argv[1], sys.argv[2]
    def stand_in(cluster_id):  # a process of a cluster, as the guardian finds them
        env = dict(os.environ, IPP_CLUSTER_ID=cluster_id)
        return subprocess.Popen(["sleep", "600"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True).pid
    mine, other = stand_in("guard-test-mine"), stand_in("guard-test-other")
    guard = Guard("guard-test-mine")
    guard.remove_later([folder])
    guard.wait_ready()
    child = os.fork() if how == "forks" else 0
    if how == "forks" and child == 0:  # outlives us, holding the pipe's write end
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)  # and not the test's pipes, which it would hold open
        os.dup2(quiet, 2)
        time.sleep(600)
    print(mine, other, guard.process.pid, child, flush=True)
    if how == "stops":
        guard.dismiss()
    else:
        os.kill(os.getpid(), signal.SIGKILL)
""")


def live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("how", ["dies", "forks", "stops"])
def test_the_guardian_ends_its_own_cluster_only_and_only_when_its_kernel_dies(how, tmp_path):
    """dies: the kernel is killed. forks: it is killed while a child it forked holds the pipe (the
    guardian sees its parent change). stops: it stops the cluster: the guardian exits, touching nothing."""
    folder = tmp_path / "leftover"
    folder.mkdir()
    out = subprocess.run([sys.executable, "-c", GUARDED, how, str(folder)], capture_output=True, text=True,
                         timeout=60)
    pids = [int(pid) for pid in out.stdout.split()]
    assert len(pids) == 4, out.stdout + out.stderr
    mine, other, guardian, forked = pids
    try:
        t0 = time.monotonic()
        while live(guardian) and time.monotonic() - t0 < LIMIT_S:
            time.sleep(0.05)
        print(f"\n{how}: the guardian exited {time.monotonic() - t0:.1f} s later")
        assert not live(guardian)
        assert live(mine) == (how == "stops")
        assert folder.exists() == (how == "stops")
        assert live(other)  # another cluster's id: never touched
    finally:
        for pid in (mine, other, guardian, forked):
            if pid and live(pid):
                os.kill(pid, signal.SIGKILL)
