"""Starting and stopping MPI engine clusters: settings, bad input, and no leftovers."""
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import dplab
from dplab import ClusterError
from dplab.cluster import local, network, processes, settings
from dplab.cluster.settings import Settings

resolve = Settings.resolve

from tests.support.processes import cluster_process_names, descendants, open_paths, wait_until_gone


# -- settings and bad input: all raised before any process starts ---------------

@pytest.mark.parametrize("n", [0, -1, "four", 2.5, None])
def test_bad_engine_count_is_refused_before_start(n, monkeypatch, leaves_nothing):
    if n is None:
        n = settings.max_engines() + 1
    with pytest.raises(ClusterError, match="engine count"):
        dplab.start_cluster(n)


def test_bad_engine_count_from_environment_names_the_variable(monkeypatch, leaves_nothing):
    monkeypatch.setenv("DPLAB_ENGINES", "zero")
    with pytest.raises(ClusterError, match="DPLAB_ENGINES"):
        dplab.start_cluster()


def test_missing_mpiexec_says_how_to_fix(monkeypatch, tmp_path, leaves_nothing):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match=r"mpiexec not found: run `make setup`"):
        dplab.start_cluster(2)


def test_nccl_without_gpus_is_refused(monkeypatch, leaves_nothing):
    monkeypatch.setattr(settings, "count_gpus", lambda: 0)
    with pytest.raises(dplab.BackendError, match="NCCL works on GPUs only, and no GPU is visible"):
        dplab.start_cluster(2, backend="nccl")


def test_unknown_backend_is_refused(leaves_nothing):
    with pytest.raises(dplab.BackendError, match="unknown backend"):
        dplab.start_cluster(2, backend="nccl2")


def test_port_already_taken_is_refused(leaves_nothing):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(dplab.PortInUseError, match="already in use"):
            dplab.start_cluster(2, port=s.getsockname()[1])


def test_environment_overrides_count_backend_device_and_port(monkeypatch):
    monkeypatch.setattr(settings, "count_gpus", lambda: 8)
    port = network.free_port()
    monkeypatch.setenv("DPLAB_ENGINES", "8")
    monkeypatch.setenv("DPLAB_BACKEND", "nccl")
    monkeypatch.setenv("DPLAB_PORT", str(port))
    s = resolve()
    assert (s.p, s.backend, s.device, s.port) == (8, "nccl", "cuda", port)
    monkeypatch.setenv("DPLAB_DEVICE", "cpu")
    monkeypatch.delenv("DPLAB_BACKEND")
    assert (resolve().backend, resolve().device) == ("gloo", "cpu")


@pytest.mark.parametrize("threads", ["0", "-2", "two", "1.5"])
def test_bad_thread_count_from_environment_is_refused_before_start(threads, monkeypatch, leaves_nothing):
    monkeypatch.setenv("DPLAB_THREADS", threads)
    with pytest.raises(ClusterError, match="DPLAB_THREADS"):
        dplab.start_cluster(2)


def test_thread_count_comes_from_argument_then_environment(monkeypatch):
    assert resolve(p=1).threads is None
    monkeypatch.setenv("DPLAB_THREADS", "3")
    assert resolve(p=1).threads == 3
    assert resolve(p=1, threads=2).threads == 2


def test_arguments_beat_environment(monkeypatch):
    monkeypatch.setenv("DPLAB_ENGINES", "3")
    assert resolve(p=2).p == 2
    assert resolve().p == 3


def test_default_is_four_engines_on_gloo_without_gpus(monkeypatch):
    monkeypatch.setattr(settings, "count_gpus", lambda: 0)
    s = resolve()
    assert (s.p, s.backend, s.device) == (4, "gloo", "cpu")


def test_port_is_left_to_rank_0_unless_requested(monkeypatch):
    assert resolve(p=1).port is None
    monkeypatch.setenv("DPLAB_PORT", "not-a-port")
    with pytest.raises(ClusterError, match="DPLAB_PORT"):
        resolve(p=1)


def test_two_clusters_at_once_get_different_ports(tmp_path):
    """Two learners on one node: each cluster's rank 0 gets its own free port (the other
    learner's cluster has one engine: its rank 0 picks a port all the same)."""
    script = textwrap.dedent(
        """
        import sys, dplab
        with dplab.start_cluster(1) as c:
            print(c.port, flush=True)
            sys.stdin.readline()
        """
    )
    other = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        other_port = int(other.stdout.readline())
        with dplab.start_cluster(2) as c:
            c.view.execute("import torch, torch.distributed as dist; s = torch.ones(1); dist.all_reduce(s)")
            assert [t.item() for t in c.view["s"]] == [2.0, 2.0]
            assert c.port != other_port
    finally:
        other.communicate("\n", timeout=60)
    assert other.returncode == 0


def test_requested_thread_count_reaches_every_rank_and_oversubscribed_threads_wait_passively(monkeypatch):
    cores = os.cpu_count()
    monkeypatch.setenv("DPLAB_THREADS", str(cores))  # 2 ranks x all cores: more threads than cores
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with dplab.start_cluster(2) as c:
        c.view.execute("import os, torch; n_threads = torch.get_num_threads(); "
                       "policy = os.environ.get('OMP_WAIT_POLICY')")
        assert c.view["n_threads"] == [cores, cores]
        assert c.view["policy"] == ["PASSIVE", "PASSIVE"]


def test_openmp_waits_passively_only_when_threads_outnumber_cores(monkeypatch):
    cores = os.cpu_count()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert local.engine_environment(cores, None) == {}  # one thread per rank: nothing to spin
    assert local.engine_environment(1, cores) == {}
    assert local.engine_environment(cores + 1, None) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert local.engine_environment(2, cores) == {"OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice wins
    assert local.engine_environment(2, cores) == {}


def test_requested_port_is_used():
    port = network.free_port()
    with dplab.start_cluster(1, port=port) as c:
        assert c.port == port


# -- real clusters ----------------------------------------------------------------

def test_cluster_ranks_join_one_process_group_and_stop_cleanly():
    before = descendants()
    with dplab.start_cluster(2) as c:
        # two ranks on one node share its cores
        c.view.execute("import torch; n_threads = torch.get_num_threads()")
        assert c.view["n_threads"] == [settings.threads_per_rank(2)] * 2
        cid = c.cluster_id
        assert cluster_process_names(cid), "engines should be running"
        c.view.execute(
            "import os\n"
            "env = {k: os.environ[k] for k in ('RANK', 'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', 'LOCAL_RANK')}"
        )
        envs = c.view["env"]
        assert [e["RANK"] for e in envs] == ["0", "1"]
        assert envs[1] == {
            "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(c.port),
            "WORLD_SIZE": "2", "LOCAL_RANK": "1",
        }
        c.view.execute(
            "import torch, torch.distributed as dist\n"
            "t = torch.arange(2) + 1 + 2 * rank\n"
            "dist.all_reduce(t)\n"
        )
        import torch

        expected = sum(torch.arange(2) + 1 + 2 * r for r in range(2)).tolist()
        assert [t.tolist() for t in c.view["t"]] == [expected] * 2
        assert c.view["world_size"] == [2, 2]
        assert c.view["local_rank"] == [0, 1]
        # the names on the engines are their RankInfo records, which the client keeps
        assert c.view["device"] == [torch.device("cpu")] * 2
        assert [i.engine_names() for i in c.ranks] == [
            {"rank": r, "world_size": 2, "local_rank": r, "device": torch.device("cpu")} for r in range(2)
        ]
        assert {(i.port, i.host) for i in c.ranks} == {(c.port, socket.gethostname())}
        # the kernel holds its stack folder open while the cluster lives: a SLURM epilog
        # (tools/slurm/start.sh) removes only the folders nobody holds
        stacks = c.stacks_folder
        assert stacks in open_paths("self")
    assert not c.running
    assert wait_until_gone(descendants() - before) == set()
    assert cluster_process_names(cid) == []
    assert not os.path.exists(stacks) and stacks not in open_paths("self")


def test_error_inside_with_block_still_stops_everything():
    before = descendants()
    with pytest.raises(ZeroDivisionError):
        with dplab.start_cluster(2, init_torch=False) as c:
            cid = c.cluster_id
            1 / 0
    assert wait_until_gone(descendants() - before) == set()
    assert cluster_process_names(cid) == []


def test_failure_while_joining_the_process_group_leaves_nothing_running():
    before = descendants()
    bad = Settings(p=2, backend="nccl", device="cuda")
    c = local.Cluster(bad, local.MpiexecLauncher())
    with pytest.raises(Exception, match="GPU"):
        c.start()
    assert not c.running
    assert wait_until_gone(descendants() - before) == set()


def test_starting_a_second_cluster_stops_the_first():
    first = dplab.start_cluster(1, init_torch=False)
    first_id = first.cluster_id
    second = dplab.start_cluster(1, init_torch=False)
    try:
        assert not first.running and second.running
        assert cluster_process_names(first_id) == []
    finally:
        second.stop()


def test_interpreter_exit_stops_a_cluster_nobody_stopped(tmp_path):
    """One engine, in torch's process group: stopping at exit leaves the group, as with more."""
    script = textwrap.dedent(
        """
        import dplab
        c = dplab.start_cluster(1)
        print(c.cluster_id, flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cid = out.stdout.strip().splitlines()[-1]
    assert cid
    import time

    deadline = time.time() + 10
    while cluster_process_names(cid) and time.time() < deadline:
        time.sleep(0.5)
    assert cluster_process_names(cid) == []


def test_a_file_mapped_and_then_closed_is_found_for_removal():
    """MPICH may close a shared-memory segment's file once it has mapped it: what a killed
    cluster leaves behind is read from the processes' maps too, not only their open files."""
    path = f"/dev/shm/mpich_shm_dplab_test_{os.getpid()}"
    script = ("import ctypes, mmap, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
              "os.ftruncate(fd, 4096)\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "libc.mmap.restype = ctypes.c_void_p\n"  # Python's mmap keeps a copy of the descriptor
              "assert libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0) not in (None, 2**64 - 1)\n"
              "os.close(fd)\nprint('mapped', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mapped"
        import psutil

        holder = psutil.Process(proc.pid)
        assert path not in {f.path for f in holder.open_files()}  # closed: only the mapping holds it
        assert path in processes.mapped_files(proc.pid)
        assert processes.files_held_open([holder]) == {path}
    finally:
        proc.kill()
        proc.wait()
        processes.unlink(path)


def test_a_segment_is_left_only_once_no_live_process_maps_it_and_nobody_removes_it():
    """leaves_nothing's rule for /dev/shm (tests.support.processes.segments_left): a process
    that imports mpi4py.MPI without mpiexec (an MPICH singleton: a page test, a learner's kernel
    beside the suite) holds /dev/shm/mpich_shm_<PID in hex>_0 while it lives, which is not a
    leak of the test running beside it; once it is killed without finalising, the file is left,
    unless another program removes it within the settling time (as the launching chapter, built
    beside the kit's tests, does with the file of the ranks it kills)."""
    import threading

    from tests.support.processes import SINGLETON, mpich_segments, segments_left, singleton_segment

    before = mpich_segments()
    proc = subprocess.Popen([sys.executable, "-c", SINGLETON], stdout=subprocess.PIPE, text=True)
    mine = singleton_segment(proc.pid)
    try:
        assert proc.stdout.readline().split() == ["up", str(proc.pid)]
        assert mine in mpich_segments() - before  # a singleton's segment, named by its PID
        assert segments_left(before) == set()  # mapped by a live process: not left
        proc.kill()
        proc.wait()
        assert segments_left(before, settle_s=1) == {mine}  # killed before MPI_Finalize: left
        remover = threading.Timer(0.5, processes.unlink, [f"/dev/shm/{mine}"])
        remover.start()
        assert segments_left(before, settle_s=5) == set()  # removed by another: not left
        remover.join()
    finally:
        proc.kill()
        proc.wait()
        processes.unlink(f"/dev/shm/{mine}")
