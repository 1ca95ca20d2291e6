"""PyTorch's Flight Recorder on a hang: every rank's buffer of its last collectives, saved and analysed.

With the `flight_recorder` setting on, each rank keeps its last collectives in torch's Flight
Recorder (TORCH_FR_BUFFER_SIZE, set by `dplab.cluster.engine.setup`), and a thread of its own
waits for a request in the stacks folder (shared by the nodes). A thread can dump the buffer
while the rank's main thread is blocked in a Gloo collective, which releases the GIL.

- engine side: `answer_requests(folder, rank)`, and `write_dump(path)`, which fills in the
  table of process groups that torch leaves empty for Gloo (`fill_in_groups`);
- watch side: `collect(folder, ranks)` asks every rank for its buffer when the watch gives up on
  stuck ranks, and copies what arrives to a folder that outlives the cluster, as `rank_<r>`
  (removed when the process that made it, the kernel, exits);
- `analyze(folder)` runs torch's analyzer (torch.distributed.flight_recorder.fr_trace) on it,
  and names the ranks it blames.
"""
from __future__ import annotations

import ast
import atexit
import contextlib
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

#: The analyzer's module (torch ANALYZER_SINCE and later ship it; before, it lived in pytorch's tools/).
ANALYZER = "torch.distributed.flight_recorder.fr_trace"
ANALYZER_SINCE = "2.10"  # the first torch whose wheel holds it (2.9.0's does not: checked in both wheels)
#: The first torch whose analyzer reads Gloo's buffers: 2.10.0's and 2.11.0's assert that every
#: collective's name starts with nccl: or xccl: ("name formatting error? gloo != 'nccl' or
#: 'xccl'", components/types.py, Op); 2.12.1's accepts gloo: (checked in those wheels).
GLOO_ANALYZER_SINCE = "2.12"
#: torch's own default ring (TORCH_FR_BUFFER_SIZE unset): DEFAULT_RING collectives per process from
#: DEFAULT_RING_SINCE on, none before (FlightRecorder.hpp of each wheel; tests/test_flight_recorder.py
#: reads the installed torch's header).
DEFAULT_RING = 2000
DEFAULT_RING_SINCE = "2.11"
PREFIX = "rank_"  # the analyzer finds each rank's buffer as <prefix><rank>
SAVED = "dplab-flight-"  # collect()'s folders, in the temporary folder: SAVED<kernel's PID>-...
POLL_S = 0.1  # how often a rank looks for a request
COLLECT_S = 10.0  # how long the watch waits for the buffers (3 s missed one rank beside stress-ng)
RERUN = ("run cluster.restart() (the recorder stays on) and the cell that hangs again, "
         "then dplab.analyze_flight_records()")

#: The folder the last collect() saved in this process: analyze()'s default.
last_records: str | None = None


class FlightRecordsError(RuntimeError):
    """Flight Recorder buffers that cannot be analysed; the message says what to re-run."""


class AnalyzerMissing(FlightRecordsError):
    """This torch has no Flight Recorder analyzer for these buffers (none before ANALYZER_SINCE,
    none for Gloo's before GLOO_ANALYZER_SINCE): the buffers are saved and complete, and a newer
    torch can analyse them. The one FlightRecordsError a lab may expect."""


def torch_problem() -> str | None:
    """Why this torch cannot record Gloo's collectives for the analyzer, or None if it can."""
    try:
        import torch
        from torch._C import _distributed_c10d as c10d
    except ImportError:
        return "this torch has no torch.distributed"
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if version < (2, 8) or not hasattr(c10d, "_dump_fr_trace"):
        return f"torch {torch.__version__.split('+')[0]} cannot dump Gloo's collectives (torch 2.8 and later can)"
    return None


# -- engine side -------------------------------------------------------------------

def request_file(folder: str) -> str:
    """The file the watch writes a request into (a new token each time)."""
    return os.path.join(folder, "flight.request")


def buffer_file(folder: str, rank: int) -> str:
    """Where rank `rank` writes its buffer when asked: empty until then."""
    return os.path.join(folder, f"rank{rank}.flight")


def error_file(folder: str, rank: int) -> str:
    """Where rank `rank` says why it could not write its buffer, instead of writing it."""
    return os.path.join(folder, f"rank{rank}.flight-error")


def fill_in_groups(dump: dict, groups: dict) -> dict:
    """The dump, with the process groups its entries name added to its table (pg_config) from
    `groups` (name -> {name, desc, ranks}) when the table lacks them.

    For Gloo, torch writes one nameless row ({'': {'name': '', ...}}), and the analyzer then fails
    on the first entry (KeyError). A table that holds every group used is kept as torch wrote it.
    """
    used = {e["process_group"][0] for e in dump.get("entries", [])}
    table = dump.get("pg_config") or {}
    if used <= set(table):
        return dump
    fixed = {name: row for name, row in table.items() if name}  # less the nameless row
    fixed.update({name: groups[name] for name in sorted(used - set(fixed)) if name in groups})
    return {**dump, "pg_config": fixed}


def group_table() -> dict:
    """This process's process groups, as the analyzer's table: name -> {name, desc, ranks}."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    return {name: {"name": name, "desc": getattr(pg, "group_desc", "") or "",
                   "ranks": str(dist.get_process_group_ranks(pg))}
            for pg, name in list(_world.pg_names.items())}


def write_dump(path: str) -> None:
    """Write this process's Flight Recorder buffer to `path`, groups filled in; atomically."""
    import torch

    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    _write_atomically(path, pickle.dumps(fill_in_groups(dump, group_table())))


def _write_atomically(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file: the watch never reads half of it."""
    with open(f"{path}.tmp", "wb") as f:
        f.write(data)
    os.replace(f"{path}.tmp", path)


_target: list = []  # [folder, rank] the thread answers for; set again by a later setup


def answer_requests(folder: str, rank: int) -> None:
    """Dump this rank's buffer to buffer_file(folder, rank) at each new request, from a daemon
    thread (one per process), which polls request_file(folder); files made now, so the watch
    and the thread only ever reopen them (a shared file system sees that at once)."""
    open(request_file(folder), "a").close()
    open(buffer_file(folder, rank), "wb").close()
    started = bool(_target)
    _target[:] = [folder, rank]
    if not started:  # the request already there is old: read now, not when the thread first runs
        threading.Thread(target=_serve, args=(_read(request_file(folder)),), name="dplab-flight-recorder",
                         daemon=True).start()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _serve(seen: str) -> None:
    while True:
        time.sleep(POLL_S)
        folder, rank = _target
        token = _read(request_file(folder))
        if token and token != seen:
            seen = token
            try:
                write_dump(buffer_file(folder, rank))
            except Exception as e:  # noqa: BLE001 - any: the watch reports it, and stops waiting
                with contextlib.suppress(OSError):  # the folder is gone: nobody is waiting
                    _write_atomically(error_file(folder, rank), f"{type(e).__name__}: {e}".encode())


# -- watch side --------------------------------------------------------------------

def collect(folder: str, ranks: list[int], timeout: float = COLLECT_S
            ) -> tuple[str | None, list[int], dict[int, str]]:
    """Ask `ranks` for their buffers, wait up to `timeout` s for each to answer (its buffer, or
    why it could not write it), and copy the buffers that arrived, as rank_<r>, to a new folder
    that outlives the cluster. (that folder or None, the ranks saved, rank -> why it sent none,
    for the ranks that said)."""
    global last_records
    files = {r: buffer_file(folder, r) for r in ranks}
    errors = {r: error_file(folder, r) for r in ranks}
    try:
        for r in ranks:
            open(files[r], "wb").close()  # empty: what a rank has not answered yet
            with contextlib.suppress(FileNotFoundError):
                os.unlink(errors[r])  # an earlier request's
        with open(request_file(folder), "w") as f:
            f.write(str(time.time_ns()))
    except OSError:
        return None, [], {}

    def answered(r: int) -> bool:
        return bool(_size(files[r])) or os.path.exists(errors[r])

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(map(answered, ranks)):
        time.sleep(0.05)
    saved = [r for r, path in files.items() if _size(path)]
    said = {r: _read(errors[r]) for r in ranks if r not in saved and os.path.exists(errors[r])}
    if not saved:
        return None, [], said
    sweep()
    out = tempfile.mkdtemp(prefix=f"{SAVED}{os.getpid()}-")
    # The learner reads it after the cluster is gone; nothing reads it after the kernel is. The
    # kernel removes it as it exits; a kernel that is killed (nbval kills its kernel at the end)
    # runs no atexit hook, so a guardian of its own removes it then (sweep: one that died too)
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    with contextlib.suppress(OSError):  # no guardian: the error being reported matters more
        _keeper().remove_later([out])
    for r in saved:
        shutil.copyfile(files[r], os.path.join(out, f"{PREFIX}{r}"))
    last_records = out
    return out, saved, said


_guardian = None  # this kernel's guardian of its saved folders, once it saved one


def _keeper():
    """The guardian (dplab.cluster.guard) that removes this process's saved folders if it is
    killed: one per kernel, for no cluster (no process carries its id), dismissed at exit."""
    global _guardian
    if _guardian is None:
        from .guard import Guard

        _guardian = Guard(f"{SAVED}{os.getpid()}")
        atexit.register(_guardian.dismiss)
    return _guardian


def discard_saved() -> None:
    """Remove the folders this process saved, and end their guardian: what its exit does."""
    global _guardian
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if name.startswith(f"{SAVED}{os.getpid()}-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    if _guardian is not None:
        _guardian.dismiss()
        _guardian = None


def sweep() -> list[str]:
    """Remove the folders of saved buffers whose kernel has ended (their name carries its PID);
    the folders removed."""
    import psutil

    gone = []
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name[len(SAVED):].split("-", 1)[0]
        if name.startswith(SAVED) and pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            gone.append(name)
    return gone


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- the analyzer --------------------------------------------------------------------

@dataclass(frozen=True)
class FlightAnalysis:
    """What torch's analyzer says of the buffers; str() is the summary."""

    raw: str  # its output as it wrote it
    text: str  # the same, each file of a stack trace cut to its name, and each trace to the frames
    #           down to the notebook cell's ("cell:LINE")
    summary: str  # the same without the stack traces
    missing: frozenset  # ranks that did not join a collective the others called
    culprits: frozenset  # ranks whose collective did not match the others' ("Culprit rank N")

    @property
    def ranks(self) -> list[int]:
        """Every rank the analyzer names."""
        return sorted(self.missing | self.culprits)

    def __str__(self) -> str:
        return self.summary


_FRAME = re.compile(r"^(\s*\S+ at )(.*):(\d+)$")  # "all_reduce at /path/file.py:123"
_CELL = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")


def _short(line: str) -> str:
    m = _FRAME.match(line)
    if not m:
        return line.rstrip()
    name = "cell" if _CELL.search(m.group(2)) else re.split(r"[/\\]", m.group(2))[-1]
    return f"{m.group(1)}{name}:{m.group(3)}"


def _through_the_cell(lines: list[str]) -> list[str]:
    """The lines, each stack trace cut after the notebook cell's frame (the kernel's own below it)."""
    kept, past_cell = [], False
    for line in lines:
        frame = _FRAME.match(line)
        past_cell = past_cell and bool(frame)
        if not past_cell:
            kept.append(line)
        past_cell = past_cell or (bool(frame) and line.rstrip().rsplit(" ", 1)[-1].startswith("cell:"))
    return kept


def _summary(lines: list[str]) -> str:
    """The analyzer's lines less its stack traces (a 'collective stack trace:' line, then frames)."""
    kept = [line for line in lines if not _FRAME.match(line) and not line.startswith("collective stack trace")]
    return "\n".join(line for line in kept if line.strip())


def _world_size(dump: dict) -> int | None:
    for row in (dump.get("pg_config") or {}).values():
        if row.get("desc") == "default_pg":
            return len(ast.literal_eval(row["ranks"]))
    return None


def comm_libs(folder: str) -> set[str]:
    """The communication libraries ('gloo', 'nccl') whose collectives the buffers in `folder`
    hold: each entry's profiling name is '<library>:<collective>'."""
    libs = set()
    for name in os.listdir(folder):
        if re.fullmatch(rf"{PREFIX}\d+", name):
            with open(os.path.join(folder, name), "rb") as f:
                entries = pickle.load(f).get("entries") or []
            libs |= {str(e.get("profiling_name", "")).split(":")[0] for e in entries} - {""}
    return libs


def check_folder(folder: str) -> list[int]:
    """The ranks whose buffers `folder` holds; raise if one is missing or unreadable."""
    if not os.path.isdir(folder):
        raise FlightRecordsError(f"the folder of Flight Recorder buffers is gone (it was temporary): {RERUN}")
    found, world = {}, set()
    for name in os.listdir(folder):
        if re.fullmatch(rf"{PREFIX}\d+", name):
            found[int(name[len(PREFIX):])] = os.path.join(folder, name)
    for rank, path in sorted(found.items()):
        try:
            with open(path, "rb") as f:
                dump = pickle.load(f)
            world.add(_world_size(dump) or 0)
        except Exception:  # noqa: BLE001 - any failure to read it: truncated, not a pickle
            raise FlightRecordsError(f"rank {rank}'s Flight Recorder buffer is truncated or unreadable: "
                                     f"{RERUN}") from None
    expected = set(range(max(world | {max(found, default=-1) + 1})))
    if missing := sorted(expected - set(found)):
        who = ", ".join(map(str, missing))
        raise FlightRecordsError(f"no Flight Recorder buffer from rank{'s' if len(missing) > 1 else ''} {who} "
                                 f"(the analyzer needs every rank's): {RERUN}")
    return sorted(found)


def analyze(folder: str | None = None, timeout: float = 60) -> FlightAnalysis:
    """Run torch's Flight Recorder analyzer on `folder` (default: the last one saved in this
    process, a StuckRanksError's `flight_records`), at most `timeout` s; name the ranks it blames."""
    import importlib.util

    import torch

    from dplab.compat import at_least

    folder = folder or last_records
    if folder is None:
        raise FlightRecordsError("no Flight Recorder buffers were saved in this session: start the cluster "
                                 "with flight_recorder=64 (or DPLAB_FLIGHT_RECORDER=64) and run the cell "
                                 "that hangs")
    check_folder(str(folder))
    if importlib.util.find_spec(ANALYZER.rsplit(".", 1)[0]) is None:
        raise AnalyzerMissing(
            f"torch {torch.__version__.split('+')[0]} has no Flight Recorder analyzer ({ANALYZER}, in torch "
            f"{ANALYZER_SINCE} and later): the buffers are saved; analyse them with a newer torch: "
            f"python -m {ANALYZER} FOLDER -p {PREFIX}")
    if "gloo" in comm_libs(str(folder)) and not at_least(GLOO_ANALYZER_SINCE, torch.__version__):
        raise AnalyzerMissing(
            f"torch {torch.__version__.split('+')[0]}'s Flight Recorder analyzer reads NCCL's buffers, "
            f"not Gloo's (torch {GLOO_ANALYZER_SINCE} and later read both): the buffers are saved; "
            f"analyse them with a newer torch: python -m {ANALYZER} FOLDER -p {PREFIX}")
    try:
        done = subprocess.run([sys.executable, "-m", ANALYZER, str(folder), "-p", PREFIX], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FlightRecordsError(f"torch's Flight Recorder analyzer took more than {timeout:g} s: "
                                 "call dplab.analyze_flight_records(timeout=...) with more") from None
    lines = [_short(line) for line in done.stdout.splitlines()]
    if done.returncode != 0:
        last = next((line for line in reversed(lines) if line.strip()), "")
        raise FlightRecordsError(f"torch's Flight Recorder analyzer failed ({last}): {RERUN}")
    text = "\n".join(_through_the_cell(lines))
    missing = {r for m in re.finditer(r"missing ranks: (\{[\d, ]*\})", text) for r in ast.literal_eval(m.group(1))}
    culprits = {int(r) for r in re.findall(r"Culprit rank (\d+)", text)}
    return FlightAnalysis(done.stdout, text, _summary(lines), frozenset(missing), frozenset(culprits))
