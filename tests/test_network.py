"""Nothing of a learner's cluster is reachable from the network (issue 16).

On one node every socket the kit's processes listen on is on loopback, with the exceptions
the README's Security section documents: mpiexec's (hydra's) control port, which hydra binds
to every interface whatever it is told, and torchrun's rendezvous stores.
"""
import contextlib
import json
import os
import stat
import time

import psutil
import pytest

import dplab
from dplab import ClusterError
from dplab.cluster import engine, handle, local
from dplab.cluster import network
from dplab.cluster.jobs import run_job
from dplab.cluster.settings import Settings
from dplab.cluster.torchrun import TorchrunJob

from tests.support.processes import descendants
from tests.support.sockets import is_loopback, listening

HERE = os.path.dirname(__file__)


def test_is_loopback_tells_loopback_from_other_addresses():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.0.2.2", "10.0.0.1", "fe80::1"]))


@pytest.fixture(scope="module")
def cluster_and_before():
    """One 2-engine cluster for the two tests that look at a running one (the second stops
    it), and the processes that ran before it started."""
    before = descendants()
    cluster = dplab.start_cluster(2)
    yield cluster, before
    cluster.stop()


def test_a_running_cluster_listens_on_loopback_only_except_mpiexecs_control_port(cluster_and_before,
                                                                                 leaves_nothing):
    c, before = cluster_and_before
    assert c.running
    c.view.execute("import torch, torch.distributed as dist; t = torch.ones(1); dist.all_reduce(t)")
    assert [t.item() for t in c.view["t"]] == [2.0, 2.0]  # Gloo's pairs are connected
    procs = []
    for pid in descendants() - before:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:  # a short-lived helper that is gone already
            pass
    names = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            names.add(proc.name())
    assert "hydra_pmi_proxy" in names and any(n.startswith("mpiexec") for n in names), names  # all of it
    sockets = listening(procs)
    # hydra's control port: mpiexec's one listening socket, which its proxy and the ranks inherit
    control = {port for name, _, port in sockets if name.startswith("mpiexec")}
    assert len(control) == 1, sockets
    exposed = [s for s in sockets if not is_loopback(s[1]) and s[2] not in control]
    assert exposed == [], f"listening beyond loopback: {exposed}"
    # the rendezvous store is there, on loopback (not merely absent from the list)
    assert any(port == c.port and is_loopback(ip) for _, ip, port in sockets), sockets
    # MPICH's network module (UCX) and Gloo were told the loopback interface
    c.view.execute("import os; nets = (os.environ['UCX_NET_DEVICES'], os.environ['GLOO_SOCKET_IFNAME'])")
    lo = network.loopback_interface()
    assert c.view["nets"] == [(lo, lo)] * 2


# -- the private folder where ranks dump their stacks ---------------------------------------

def _can_list_as(uid: int, gid: int, path: str) -> bool:
    """Whether a process running as uid:gid can list `path` (a forked child drops to that user)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 2
        try:
            os.setgid(gid)
            os.setuid(uid)
            try:
                os.listdir(path)
                code = 0
            except PermissionError:
                code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) in (0, 1), "the child could not drop to the other user"
    return os.WEXITSTATUS(status) == 0


def test_stack_folder_is_private_and_removed_on_stop(cluster_and_before, leaves_nothing):
    c, _ = cluster_and_before
    if not c.running:  # the test before failed and stopped it
        c.restart()
    folder = c.stacks_folder
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert os.stat(folder).st_uid == os.geteuid()
    if os.geteuid() == 0:  # only root can become another user to try
        import pwd

        nobody = pwd.getpwnam("nobody")
        assert not _can_list_as(nobody.pw_uid, nobody.pw_gid, folder)
        assert _can_list_as(0, 0, folder)  # the check itself can succeed
    c.stop()
    assert not os.path.exists(folder)


def test_stack_folder_is_removed_after_a_failed_start(monkeypatch, leaves_nothing):
    made, mkdtemp = [], handle.tempfile.mkdtemp

    def spy(*args, **kwargs):
        path = mkdtemp(*args, **kwargs)
        if os.path.basename(path).startswith("dplab-stacks-"):
            made.append(path)
        return path

    monkeypatch.setattr(handle.tempfile, "mkdtemp", spy)
    bad = Settings(p=2, backend="nccl", device="cuda")
    with pytest.raises(Exception, match="GPU"):
        handle.Cluster(bad, local.MpiexecLauncher()).start()
    assert len(made) == 1 and not os.path.exists(made[0])


# -- MPI jobs and torchrun ------------------------------------------------------------------

def test_an_mpi_job_listens_on_loopback_only_except_mpiexecs_control_port(leaves_nothing):
    out = run_job(os.path.join(HERE, "mpi", "list_listening.py"), 2, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    decoder, ranks = json.JSONDecoder(), []
    for i in range(len(out.stdout)):  # ranks' lines may arrive glued together
        if out.stdout.startswith('{"rank"', i):
            ranks.append(decoder.raw_decode(out.stdout, i)[0])
    assert sorted(r["rank"] for r in ranks) == [0, 1], out.stdout
    for r in ranks:
        exposed = [(ip, port) for ip, port in r["listening"] if not is_loopback(ip) and port != r["control_port"]]
        assert exposed == [], f"rank {r['rank']} listens beyond loopback: {exposed}"
    store = [r for r in ranks if r["rank"] == 0][0]
    assert any(port == store["store_port"] and is_loopback(ip) for ip, port in store["listening"])


def test_torchrun_workers_listen_on_loopback_only_except_the_rendezvous_stores(tmp_path, leaves_nothing):
    script = tmp_path / "worker.py"
    script.write_text("import time, torch, torch.distributed as dist\n"
                      "dist.init_process_group('gloo'); t = torch.ones(1); dist.all_reduce(t)\n"
                      "print('joined', flush=True); time.sleep(60)\n")
    with TorchrunJob(script, nproc=2, timeout=90) as job:
        for _, line in job.lines():
            if "joined" in line:
                break
        time.sleep(0.5)  # let rank 1 finish its all-reduce too
        agent = psutil.Process(job.proc.pid)
        workers = agent.children(recursive=True)
        rank0 = job.worker(0)
        sockets = {p.pid: listening([p]) for p in [agent, *workers]}
        # Gloo was told the loopback interface (it may find loopback by itself, but not on every host)
        ifnames = {w.environ().get("GLOO_SOCKET_IFNAME") for w in workers}
        made = os.listdir(job.tmp)
        job.kill()
    assert ifnames == {network.loopback_interface()}
    # torchrun's log folder went into the job's own folder, which the with block removed
    assert any(name.startswith("torchelastic_") for name in made) and not os.path.exists(job.tmp), made
    # the documented exceptions: the agent's rendezvous store, and the one rank 0 hosts for the workers
    stores = {(agent.pid, 1), (rank0.pid, 1)}
    exposed = {(pid, len([s for s in found if not is_loopback(s[1])])) for pid, found in sockets.items()}
    exposed = {e for e in exposed if e[1]}
    assert exposed <= stores, sockets
    assert len(workers) == 2 and all(any(is_loopback(s[1]) for s in sockets[w.pid]) for w in workers)


# -- DPLAB_IFACE --------------------------------------------------------------------------

def test_an_interface_that_does_not_exist_is_refused_before_start_naming_those_that_do(monkeypatch, leaves_nothing):
    monkeypatch.setenv("DPLAB_IFACE", "nosuch0")
    with pytest.raises(ClusterError, match=r"network interface 'nosuch0' does not exist on .*\(it has: .*"
                                           + network.loopback_interface() + r".*\): set DPLAB_IFACE"):
        dplab.start_cluster(2)


def test_interface_comes_from_argument_then_environment(monkeypatch):
    lo = network.loopback_interface()
    assert Settings.resolve(p=1).iface is None
    monkeypatch.setenv("DPLAB_IFACE", lo)
    assert Settings.resolve(p=1).iface == lo
    with pytest.raises(ClusterError, match="'nosuch0' does not exist"):
        Settings.resolve(p=1, iface="nosuch0")


def test_one_node_listens_on_loopback_whatever_dplab_iface_says():
    lo = network.loopback_interface()
    others = [name for name, addrs in network.interfaces().items() if addrs and name != lo]
    for iface in [None, lo, *others]:
        assert engine._listen_interface(["node1", "node1"], iface) == (lo, "127.0.0.1", None)


def test_several_nodes_listen_on_the_interface_they_share_and_need_it_named():
    lo = network.loopback_interface()
    assert engine._listen_interface(["node1", "node2"], lo) == (lo, "127.0.0.1", None)
    name, addr, problem = engine._listen_interface(["node1", "node2"], None)
    assert (name, addr) == (None, None) and "2 nodes and DPLAB_IFACE is unset: set DPLAB_IFACE" in problem
    name, addr, problem = engine._listen_interface(["node1", "node2"], "nosuch0")
    assert (name, addr) == (None, None) and "'nosuch0' does not exist" in problem


def test_a_listen_socket_is_bound_to_the_address_it_was_given():
    with network.listen_socket("127.0.0.1") as s:
        ip, port = s.getsockname()
        assert ip == "127.0.0.1" and port > 0
