"""PyTorch's Flight Recorder on a hang: every rank's buffer is saved as the watch gives up, and
torch's analyzer names the rank that skipped a collective."""
import os
import pickle
import time

import pytest

import dplab
from dplab import ClusterError
from dplab.cluster import flight
from dplab.cluster.settings import Settings

from tests.support.processes import descendants

LIMIT_S = 15  # the most a hanging cell may take to raise, buffers saved

LAST_RANK_SKIPS = """\
import torch, torch.distributed as dist
t = torch.ones(4)
dist.all_reduce(t)
if rank < world_size - 1:
    dist.all_reduce(t)
"""

ENTRY = {"process_group": ("0", "default_pg"), "profiling_name": "gloo:all_reduce", "collective_seq_id": 1}
GLOO_DUMP = {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
             "entries": [ENTRY]}
GROUPS = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
          "1": {"name": "1", "desc": "undefined", "ranks": "[1]"}}


# -- the pieces, without a cluster ---------------------------------------------

def test_the_group_table_is_filled_in_only_where_it_lacks_the_groups_used():
    fixed = flight.fill_in_groups(GLOO_DUMP, GROUPS)
    assert fixed["pg_config"] == {"0": GROUPS["0"]} and fixed["entries"] == [ENTRY]
    assert GLOO_DUMP["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}  # not changed in place
    nccl = {**GLOO_DUMP, "pg_config": {"0": {"name": "0", "desc": "mine", "ranks": "[0, 1]"}}}
    assert flight.fill_in_groups(nccl, GROUPS) is nccl  # torch's own table is kept
    assert flight.fill_in_groups({**GLOO_DUMP, "entries": []}, GROUPS)["pg_config"] == GLOO_DUMP["pg_config"]


def write(folder, rank, dump=GLOO_DUMP):
    (folder / f"rank_{rank}").write_bytes(pickle.dumps(flight.fill_in_groups(dump, GROUPS)))


def test_buffers_that_cannot_be_analysed_say_what_to_rerun(tmp_path, monkeypatch):
    monkeypatch.setattr(flight, "last_records", None)
    with pytest.raises(flight.FlightRecordsError, match="no Flight Recorder buffers were saved"):
        dplab.analyze_flight_records()
    with pytest.raises(flight.FlightRecordsError, match=r"is gone .*cluster.restart\(\)"):
        dplab.analyze_flight_records(str(tmp_path / "nowhere"))
    write(tmp_path, 0)  # rank 1's is missing: the default group has two ranks
    with pytest.raises(flight.FlightRecordsError, match=r"no Flight Recorder buffer from rank 1 .*cluster.restart"):
        flight.analyze(str(tmp_path))
    (tmp_path / "rank_1").write_bytes(pickle.dumps(GLOO_DUMP)[:20])
    with pytest.raises(flight.FlightRecordsError, match="rank 1's Flight Recorder buffer is truncated"):
        flight.analyze(str(tmp_path))
    write(tmp_path, 1)
    assert flight.check_folder(str(tmp_path)) == [0, 1]


def test_only_a_missing_analyzer_is_the_error_lab_5_expects(tmp_path, monkeypatch):
    """Lab 5 catches AnalyzerMissing alone: a truncated or missing buffer, or an analyzer that
    fails, is a FlightRecordsError of another kind, and fails the lab's cell."""
    import importlib.util

    write(tmp_path, 0)
    with pytest.raises(flight.FlightRecordsError) as lost:
        flight.analyze(str(tmp_path))  # rank 1's buffer is missing
    assert not isinstance(lost.value, flight.AnalyzerMissing)
    write(tmp_path, 1)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == flight.ANALYZER.rsplit(".", 1)[0] else real(name, *a))
    with pytest.raises(flight.AnalyzerMissing, match="has no Flight Recorder analyzer"):
        flight.analyze(str(tmp_path))


def recorded(name: str) -> dict:
    """One rank's buffer, as torch 2.13 dumps it, holding one collective `name` of the default group."""
    entry = {"frames": [], "record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
             "p2p_seq_id": 0, "op_id": 1, "profiling_name": f"gloo:{name}", "time_created_ns": 0,
             "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
             "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
             "retired": False, "timeout_ms": 1000, "is_p2p": False}
    return {**GLOO_DUMP, "pg_status": {}, "comm_lib_version": "", "entries": [entry]}


def test_the_analyzer_names_the_rank_whose_collective_differs(tmp_path):
    write(tmp_path, 0, recorded("all_reduce"))
    write(tmp_path, 1, recorded("broadcast"))
    found = flight.analyze(str(tmp_path))
    assert found.culprits == {1} and found.missing == set() and found.ranks == [1], found.raw
    assert "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in found.summary


def test_the_recorder_setting_is_checked_before_anything_starts(monkeypatch):
    assert Settings.resolve(p=2).flight_recorder is None
    assert Settings.resolve(p=2, flight_recorder=0).flight_recorder is None
    assert Settings.resolve({"DPLAB_FLIGHT_RECORDER": "32"}, p=2).flight_recorder == 32
    before = descendants()
    monkeypatch.setenv("DPLAB_FLIGHT_RECORDER", "lots")
    with pytest.raises(ClusterError, match="DPLAB_FLIGHT_RECORDER"):
        dplab.start_cluster(2)
    monkeypatch.setenv("DPLAB_FLIGHT_RECORDER", "64")
    monkeypatch.setattr(flight, "torch_problem", lambda: "torch 2.7.1 cannot dump Gloo's collectives")
    with pytest.raises(ClusterError, match="asks for the Flight Recorder, but torch 2.7.1 cannot"):
        dplab.start_cluster(2)
    assert descendants() == before


def test_an_old_torch_is_told_apart(monkeypatch):
    import torch

    assert flight.torch_problem() is None
    monkeypatch.delattr(torch._C._distributed_c10d, "_dump_fr_trace")
    assert "cannot dump Gloo's collectives (torch 2.8 and later can)" in flight.torch_problem()


# -- real clusters -------------------------------------------------------------

def hang(cluster):
    t0 = time.perf_counter()
    with pytest.raises(dplab.StuckRanksError) as caught:
        cluster.view.execute(LAST_RANK_SKIPS)
    assert time.perf_counter() - t0 < LIMIT_S and not cluster.running
    return caught.value


def test_a_skipped_collective_is_named_by_torchs_analyzer(leaves_nothing):
    with dplab.start_cluster(2, stuck_after=1, flight_recorder=16) as c:
        err = hang(c)
    text = str(err)
    assert "rank 0 was still running 1 s later, waiting in torch.distributed.all_reduce" in text
    assert ("Each rank's Flight Recorder buffer was saved (the error's flight_records): run "
            "dplab.analyze_flight_records() to see which rank's collectives differ.") in text.splitlines()
    assert "/" not in text.replace("(gloo, cpu)", "")  # no machine paths
    assert flight.check_folder(err.flight_records) == [0, 1]  # it outlives the cluster
    found = dplab.analyze_flight_records()  # the last folder saved
    assert found.missing == {1} and found.ranks == [1], found.raw
    assert "collective: gloo:all_reduce" in found.summary and "missing ranks: {1}" in str(found)
    assert "all_reduce at distributed_c10d.py:" in found.text and found.text.endswith("<module> at cell:5")
    assert "/" not in found.text and "stack trace" not in found.summary
    flight.discard_saved()  # the folder, and the guardian that removes it if this process is killed
    assert not os.path.exists(err.flight_records)


def test_with_the_recorder_off_nothing_is_saved(leaves_nothing):
    with dplab.start_cluster(2, stuck_after=1) as c:
        err = hang(c)
    assert err.flight_records is None and "Flight Recorder" not in str(err)


def test_torchs_default_ring_is_the_one_lab_5_states():
    """Lab 5 says (tied to flight.DEFAULT_RING): 2000 collectives from 2.11 on, none before. The
    installed torch's header holds its default; a torch that changed it fails here."""
    import re
    from pathlib import Path

    import torch

    header = Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d/FlightRecorder.hpp"
    if not header.exists():
        pytest.skip("this torch ships no C++ headers")
    default = re.search(r'"TORCH_FR_BUFFER_SIZE"[^;]*?\},\s*(\d+)\)', header.read_text())
    assert default, f"{header.name} no longer reads TORCH_FR_BUFFER_SIZE with a default: see Lab 5"
    release = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    since = tuple(int(x) for x in flight.DEFAULT_RING_SINCE.split("."))
    assert int(default[1]) == (flight.DEFAULT_RING if release >= since else 0), (torch.__version__, default[1])


SAVE_AND_EXIT = """\
import os, sys, threading, time
from dplab.cluster import flight
folder = sys.argv[1]
def rank0():  # a rank that answers the request
    while not os.path.exists(flight.request_file(folder)):
        time.sleep(0.01)
    with open(flight.buffer_file(folder, 0), "wb") as f:
        f.write(b"a buffer")
threading.Thread(target=rank0, daemon=True).start()
out, saved, said = flight.collect(folder, [0], timeout=10)
print(out, saved, os.path.isfile(os.path.join(out, "rank_0")), said == {})
"""


def test_the_saved_buffers_outlive_the_cluster_but_not_the_kernel(tmp_path):
    """collect()'s folder is read after the cluster is gone; the process that made it (the
    kernel) removes it as it exits, so that no kernel leaves a dplab-flight-* folder behind."""
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", SAVE_AND_EXIT, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    folder, saved, copied, none_said = out.stdout.split()
    assert (saved, copied, none_said) == ("[0]", "True", "True"), out.stdout  # saved while it ran
    assert Path(folder).name.startswith("dplab-flight-") and not Path(folder).exists(), folder


FAIL_TO_DUMP = """\
import sys, time
from dplab.cluster import flight, watch
def cannot(path):
    raise RuntimeError("no buffer here")
flight.write_dump = cannot  # what the rank's thread calls
flight.answer_requests(sys.argv[1], 1)  # this process plays rank 1 and its thread
t0 = time.monotonic()
out, saved, said = flight.collect(sys.argv[1], [1], timeout=20)
print(round(time.monotonic() - t0), out, saved, said)
print(watch.flight_line(saved, 2, said))
"""


def test_a_rank_that_cannot_dump_its_buffer_says_why_and_the_watch_stops_waiting(tmp_path):
    """The rank's thread does not swallow its error: it writes it where the watch looks, and the
    watch stops waiting for that rank's buffer and says why it has none."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FAIL_TO_DUMP, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, line = out.stdout.splitlines()
    assert first.split(" ", 1)[1] == "None [] {1: 'RuntimeError: no buffer here'}", out.stdout
    assert int(first.split()[0]) < 5, out.stdout  # not the 20 s timeout
    assert line == ("No rank's Flight Recorder buffer was saved. Rank 1 could not write its buffer: "
                    "RuntimeError: no buffer here."), line


def test_a_kernel_killed_by_sigkill_leaves_no_saved_buffers_and_no_guardian(tmp_path):
    """nbval kills its kernel at the end of a lab: no atexit hook runs. The kernel's guardian
    removes its saved folders then, and exits. Without the guardian (the sweep alone) the folder
    stays until some later save."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.processes import descendants, wait_until_gone

    before = descendants()
    kernel = subprocess.Popen([sys.executable, "-c", SAVE_AND_EXIT + "sys.stdout.flush()\ntime.sleep(600)\n",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    folder = Path(kernel.stdout.readline().split()[0])
    assert folder.name.startswith(f"{flight.SAVED}{kernel.pid}-") and folder.exists(), folder
    guardians = descendants() - before - {kernel.pid}
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    deadline = time.monotonic() + 10
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists(), f"{folder} outlived its kernel by 10 s"
    assert wait_until_gone(guardians, timeout=10) == set()


def test_a_killed_kernels_saved_buffers_are_removed_by_the_next_save(tmp_path, monkeypatch):
    """A kernel killed outright runs no atexit hook; the next collect() removes the folders of
    kernels that have ended, and no other's."""
    import os
    import subprocess
    import sys
    import tempfile

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = tmp_path / f"{flight.SAVED}{dead.stdout.strip()}-abc"
    mine = tmp_path / f"{flight.SAVED}{os.getpid()}-def"
    other = tmp_path / "dplab-flight-notapid"
    for folder in (ended, mine, other):
        folder.mkdir()
    assert flight.sweep() == [ended.name]
    assert not ended.exists() and mine.exists() and other.exists()


def test_an_analyzer_that_reads_no_gloo_buffers_is_a_missing_analyzer(tmp_path, monkeypatch):
    """torch 2.10 and 2.11 ship the analyzer, but it asserts that every collective is NCCL's or
    XCCL's: on Gloo's buffers it failed, and Lab 5 failed with it (make test-torch TORCH=2.10.0:
    "name formatting error? gloo != 'nccl' or 'xccl'"). On those releases Gloo's buffers are an
    AnalyzerMissing, which Lab 5 prints; from 2.12 the analyzer runs. The installed torch's own
    analyzer says which it is: its Op accepts a gloo: name exactly where the kit runs it."""
    import inspect

    import torch

    from dplab.compat import at_least
    from torch.distributed.flight_recorder.components import types

    write(tmp_path, 0, recorded("all_reduce"))
    write(tmp_path, 1, recorded("broadcast"))
    assert flight.comm_libs(str(tmp_path)) == {"gloo"}
    reads_gloo = '"gloo"' in inspect.getsource(types.Op.__init__)
    assert reads_gloo == at_least(flight.GLOO_ANALYZER_SINCE, torch.__version__), torch.__version__
    for version, missing in (("2.11.0+cu130", True), ("2.10.0", True), ("2.12.1", False)):
        monkeypatch.setattr(torch, "__version__", version)
        if missing:
            with pytest.raises(flight.AnalyzerMissing, match="reads NCCL's buffers, not Gloo's"):
                flight.analyze(str(tmp_path))
        else:
            monkeypatch.setattr(torch, "__version__", "2.13.0")  # the analyzer runs: this venv's
            assert flight.analyze(str(tmp_path)).culprits == {1}
