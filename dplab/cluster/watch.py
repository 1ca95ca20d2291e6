"""When some ranks of a parallel cell fail, or die, and the others wait for them forever.

A rank that raises before a collective leaves the other ranks blocked inside MPI or
torch.distributed, in C code that no KeyboardInterrupt reaches. `WatchedView` is the
cluster's view (and so what ``%%px`` uses): its results watch the ranks whichever way the
client waits, ``get()``, ``wait()``, ``wait_interactive()`` or ``%%px`` (which waits in one of
them). When a rank has failed (or finished) and the ranks still running are waiting in a
communication call `stuck_after` seconds later, the cluster reads where they are (their
Python stacks, dumped by faulthandler on SIGUSR1), stops itself, and raises
`StuckRanksError`, which names both. `wait()` raises it too, rather than return: the error
holds the diagnosis; a wait whose timeout ends first still returns False. An interrupt
(the notebook's stop button) first sends SIGINT to the ranks; those it cannot release are
handled the same way.

A rank whose process dies (it exits, or a signal kills it) ends the MPI job: mpiexec kills
the other ranks. The watch then raises `RankDiedError` (a `StuckRanksError`): the rank that
died, how (its exit code or signal) and the line of the cell it was running, all of which
the rank wrote as it died (`dplab.cluster.engine.dump_stacks_on_death`), then what became of
the other ranks.

With the `flight_recorder` setting on, the watch first saves every rank's Flight Recorder buffer
(`dplab.cluster.flight`) to a folder that outlives the cluster: the error's `flight_records`.
"""
from __future__ import annotations

import linecache
import re
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import Protocol

from ipyparallel.client.asyncresult import AsyncResult

from . import engine, flight, ipp
from .errors import ClusterError

#: Seconds an interrupted rank gets to return before the cluster is stopped.
INTERRUPT_GRACE_S = 2.0
#: Seconds that the printed output of ranks that have all returned may take to arrive.
OUTPUT_WAIT_S = 30.0
#: Seconds, after a rank died, for mpiexec to end the other ranks (MPICH ends them all at once).
DEATH_GRACE_S = 1.0

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_FILE = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")
#: mpi4py's blocking calls; mpi4py is compiled, so they leave no Python frame of their own.
#: Making a communicator (Split, Dup, Create) is a collective too: every rank of the old one waits.
_MPI_CALL = re.compile(
    r"\.(Split|Split_type|Dup|Create|Create_group|Create_cart|Probe|probe|allreduce|Allreduce|bcast|Bcast|barrier|Barrier|reduce|Reduce|gather|Gather|Gatherv|allgather|"
    r"Allgather|Allgatherv|scatter|Scatter|alltoall|Alltoall|reduce_scatter|Reduce_scatter|"
    r"Reduce_scatter_block|sendrecv|Sendrecv|recv|Recv|send|Send|ssend|Ssend|wait|Wait|waitall|Waitall|"
    r"scan|Scan|exscan|Exscan)\("
)
_KERNEL_FILES = ("/IPython/", "/ipykernel/", "/ipyparallel/", "/asyncio/", "/tornado/", "/threading.py")
#: The frames through which an engine runs a cell (execute) or a function (apply).
_RUNS_USER_CODE = (("interactiveshell.py", "run_code"), ("ipyparallel/engine/kernel.py", "do_apply"))


WIDTH = 88  # the book's code column; an output box holds a few more (tests/test_output_width.py)


class StuckRanksError(RuntimeError):
    """Some ranks failed or were interrupted while others stayed blocked; the cluster was stopped."""

    #: The folder of every rank's Flight Recorder buffer (rank_0, rank_1, ...), saved as the
    #: cluster gave up (dplab.analyze_flight_records reads it); None when the recorder was off.
    flight_records: str | None = None

    def __init__(self, message: str, failed: dict, stuck: dict):
        super().__init__(message)
        self.failed = failed  # rank -> what it raised
        self.stuck = stuck  # rank -> where it was blocked

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: the message alone, since the client-side stack says nothing
        useful, each line wrapped to fit a notebook's output box (WIDTH columns)."""
        return [part for line in f"{type(self).__name__}: {self}".splitlines()
                for part in textwrap.wrap(line, WIDTH, subsequent_indent="  ",
                                          break_long_words=False, break_on_hyphens=False)
                or [""]]


class RankDiedError(StuckRanksError):
    """A rank's process died (it exited, or a signal killed it) while running a task; the
    cluster was stopped."""

    def __init__(self, message: str, failed: dict, stuck: dict, died: dict):
        super().__init__(message, failed, stuck)
        self.died = died  # rank -> how it died ("exit code 3", "killed by SIGKILL"); None: unknown


@dataclass(frozen=True)
class Where:
    """Where a running rank is: a description, and whether it waits on other ranks."""

    text: str
    waiting: bool | None  # None: unknown (no stack could be read)


def cell_lines(code: str | None) -> list[str]:
    """The cell's lines as IPython numbers them (it drops leading blank lines)."""
    lines = (code or "").splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def _source(path: str, line: int, cell: list[str]) -> str:
    if _CELL_FILE.search(path):
        return cell[line - 1].strip() if 0 < line <= len(cell) else ""
    return linecache.getline(path, line).strip()


def _cell_or_file(path: str, line: int, cell: list[str]) -> str:
    src = _source(path, line, cell)
    place = f"line {line} of the cell" if _CELL_FILE.search(path) else f"{path.rsplit('/', 1)[-1]}:{line}"
    return f"{place}: {src}" if src else place


def parse_stacks(text: str) -> list[list[tuple[str, int, str]]]:
    """faulthandler's dump as threads, each a list of (file, line, function), innermost first."""
    threads, frames = [], None
    for raw in text.splitlines():
        # "Stack" heads a dump of one thread (the SIGUSR1 dump); the others, of every thread
        if raw.startswith(("Thread 0x", "Current thread 0x", "Stack (most recent call first)")):
            frames = []
            threads.append(frames)
        m = re.match(r'\s+File "(.*)", line (\d+) in (.*)$', raw)
        if m and frames is not None:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
    return threads


def where_from_stacks(text: str, code: str | None = None, idle: bool = False) -> Where:
    """Describe where the thread that runs the user's code is, from a faulthandler dump.

    code: the cell the rank runs, to quote its lines (ipykernel keeps no file of it).
    idle: the rank used (almost) no CPU lately. Inside backward or DDP that means it waits:
    Gloo sleeps while it waits, for instance in DDP's all-reduce at the end of backward.
    """
    if not text:
        return Where("busy; its stack could not be read", None)
    cell = cell_lines(code)
    for frames in parse_stacks(text):
        if not any(f[0].endswith(path) and f[2] == fn for f in frames for path, fn in _RUNS_USER_CODE):
            continue
        user = []
        for frame in frames:
            if any(k in frame[0] for k in _KERNEL_FILES):
                break
            user.append(frame)
        if not user:
            continue
        outer = user[-1]
        here = _cell_or_file(outer[0], outer[1], cell)
        torch_frames = [f for f in user if "torch/distributed/" in f[0] and not f[2].startswith("_")]
        if torch_frames:
            call = next((f[2] for f in torch_frames if f[2] != "wrapper"), torch_frames[0][2])
            return Where(f"waiting in torch.distributed.{call}, called at {here}", True)
        inner = user[0]
        if _MPI_CALL.search(_source(inner[0], inner[1], cell)):
            return Where(f"waiting in MPI at {_cell_or_file(inner[0], inner[1], cell)}", True)
        # DDP all-reduces from C++ inside backward (and broadcasts inside its forward): no frame
        # says so, but a rank that uses no CPU there is waiting for the other ranks.
        ddp_may_wait = [f for f in user if "/torch/autograd/" in f[0] or "/torch/nn/parallel/" in f[0]
                        or (f[0].endswith("torch/_tensor.py") and f[2] == "backward")]
        if ddp_may_wait and idle:
            return Where(f"idle inside torch's {ddp_may_wait[-1][2]}() (using no CPU: waiting, as DDP's "
                         f"all-reduce in backward does), called at {here}", True)
        return Where(f"running {here}", False)
    return Where("busy, but its stack shows no user code", None)


def describe_error(err: BaseException) -> str:
    """One line for a rank's exception: type, message, and the cell line that raised it."""
    ename = getattr(err, "ename", type(err).__name__)
    evalue = getattr(err, "evalue", str(err))
    text = f"{ename}: {evalue}" if evalue else ename
    tb = getattr(err, "traceback", None) or ""
    tb = _ANSI.sub("", "\n".join(tb) if isinstance(tb, list) else str(tb))
    m = re.search(r"Cell In\[\d+\], line (\d+)\n(?:.*\n)*?-+> ?\s*\d+\s(.*)", tb)
    if m:
        text += f" (line {m.group(1)} of the cell: {m.group(2).strip()})"
    return text


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def stuck_message(failed: dict, finished: list, stuck: dict, seconds: float, interrupted: bool,
                  settings, recorded: str = "") -> str:
    """The error text: who failed with what, who was blocked where, and what to do now.

    seconds: how long the stuck ranks were given (stuck_after, or the interrupt's grace).
    recorded: the line that says the Flight Recorder's buffers were saved (flight_line), if they were.
    """
    lines = ["Interrupted."] if interrupted else []
    lines += [f"{_ranks([r])} failed: {why}" for r, why in sorted(failed.items())]
    if finished:
        lines.append(f"{_ranks(finished)} finished the cell.")
    groups: dict[str, list[int]] = {}
    for rank, where in stuck.items():
        groups.setdefault(where.text, []).append(rank)
    for text, ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        verb = "did not return" if interrupted else "was still running" if len(ranks) == 1 else "were still running"
        lines.append(f"{_ranks(ranks)} {verb} {seconds:g} s later, {text}")
    lines += [recorded] if recorded else []
    lines.append("The cluster was stopped: a rank blocked in MPI or a collective cannot be interrupted.")
    return "\n".join(lines + [_restart(settings)])


def flight_line(saved: list[int], p: int, said: dict[int, str] | None = None) -> str:
    """The line that says whose Flight Recorder buffers were saved, and how to analyse them;
    said: rank -> why it could not write its buffer, for the ranks that said."""
    how = "run dplab.analyze_flight_records() to see which rank's collectives differ"
    why = "".join(f" Rank {r} could not write its buffer: {text}."
                  for r, text in sorted((said or {}).items()))
    if not saved:
        return f"No rank's Flight Recorder buffer was saved.{why}" if why else ""
    if len(saved) == p:
        return f"Each rank's Flight Recorder buffer was saved (the error's flight_records): {how}."
    none = [r for r in range(p) if r not in saved]
    return (f"The Flight Recorder buffers of {_ranks(saved)} were saved (the error's flight_records); "
            f"{_ranks(none)} sent none, and the analyzer needs every rank's.{why}")


def _restart(s) -> str:
    return (f"Run cluster.restart() to start {s.p} engines again ({s.backend}, {s.device}), "
            "then re-run the set-up cells (imports, data, model).")


def death_message(gone: dict, failed: dict, finished: list, running: dict, settings,
                  hosts: dict | None = None, lost: list | None = None) -> str:
    """The error text when ranks died: who died, how and where; then the other ranks.

    gone: rank -> (how it died, Where it was), each None when it wrote no stacks as it died
    (see how_it_died), for every rank that died; running: rank -> Where, for ranks still running;
    hosts: rank -> its node; lost: the nodes that no longer answer (their ranks went silent).
    """
    hosts, lost = hosts or {}, [n for n in (lost or []) if any(hosts.get(r) == n for r in gone)]
    lines = []
    first = [r for r, (how, _) in gone.items() if how and not how.startswith("ended by")]
    for rank in sorted(first):
        how, where = gone[rank]
        lines.append(f"{_ranks([rank])} died ({how}) while {where.text}")
    for node in lost:
        silent = sorted(r for r in gone if hosts.get(r) == node and r not in first)
        lines.append(f"{node} does not answer: {_ranks(silent)} on it went silent and wrote nothing. "
                     f"{node} went down, or its network link to this machine did.")
    rest = sorted(r for r in set(gone) - set(first) if hosts.get(r) not in lost)
    if rest and not lost and not any(how for how, _ in gone.values()):
        lines.append(f"{_ranks(rest)} died, and none wrote where: a SIGKILL from another process (the "
                     "out-of-memory killer's, say) leaves no trace, and mpiexec then kills the other ranks.")
    elif rest:
        groups: dict[str, list[int]] = {}
        for rank in rest:
            how, where = gone[rank]
            text = (f"{how} while {where.text}" if how else
                    "killed by mpiexec, which ends every rank of the job when one dies")
            groups.setdefault(text, []).append(rank)
        for text, ranks in groups.items():
            lines.append(f"{_ranks(ranks)} {'was' if len(ranks) == 1 else 'were'} then {text}")
    lines += [f"{_ranks([r])} failed: {why}" for r, why in sorted(failed.items())]
    if finished:
        lines.append(f"{_ranks(finished)} finished the cell.")
    for rank, where in sorted(running.items()):
        lines.append(f"{_ranks([rank])} was still running, {where.text}")
    if lost:
        lines.append("The cluster was stopped: an MPI job cannot go on without some of its ranks.")
        restart = _restart(settings)
        again = f"Once {' and '.join(lost)} answer{'s' if len(lost) == 1 else ''} again, "
        return "\n".join(lines + [again + restart[0].lower() + restart[1:]])
    lines.append("The cluster was stopped: an MPI job cannot go on once one of its ranks has died.")
    return "\n".join(lines + [_restart(settings)])


#: faulthandler's names of the fatal signals it dumps stacks on.
_FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Floating-point exception": "SIGFPE",
          "Floating point exception": "SIGFPE", "Bus error": "SIGBUS", "Illegal instruction": "SIGILL"}


def how_it_died(last: str) -> str | None:
    """How a rank ended, from the stacks it wrote as it died: "exit code 3", "killed by
    SIGKILL" (it sent that itself), "killed by SIGSEGV", "ended by SIGTERM"; None if it wrote none."""
    first = last.split("\n", 1)[0]
    if m := re.fullmatch(r"dplab: os\._exit\((-?\d+)\)", first):
        return f"exit code {m.group(1)}"
    if m := re.fullmatch(r"dplab: os\.kill\((\w+)\)", first):
        return f"killed by {m.group(1)}"
    if m := re.fullmatch(r"Fatal Python error: (.*)", first):
        return f"killed by {_FATAL.get(m.group(1).strip(), m.group(1).strip())}"
    return "ended by SIGTERM" if parse_stacks(last) else None


def last_stacks(cluster, ranks: list[int]) -> dict[int, str]:
    """rank -> the stacks it wrote as it died (dplab.cluster.engine.dump_stacks_on_death); "" if none."""
    folder = cluster.stacks_folder  # the folder the handle gave engine.setup
    found = {}
    for rank in ranks:
        try:
            with open(engine.last_stacks_file(folder, rank)) as f:
                found[rank] = f.read()
        except (OSError, TypeError):
            found[rank] = ""
    return found


def _outcome(future):
    """None while running; True when it succeeded; else the exception it ended with."""
    if not future.done():
        return None
    exc = future.exception()
    if exc is not None:
        return exc
    result = future.result()
    return result if isinstance(result, BaseException) else True


def _died(state) -> bool:
    """The rank's process died while running the task (ipyparallel's EngineError)."""
    return getattr(state, "ename", None) == "EngineError"


def _deadline(timeout) -> float | None:
    """ipyparallel's timeout (None or negative: forever) as a time.monotonic() deadline."""
    return None if timeout is None or timeout < 0 else time.monotonic() + timeout


class WatchedResult(AsyncResult):
    """An AsyncResult whose blocking waits (get, wait, wait_interactive) stop a cluster that can
    no longer finish the task, and raise StuckRanksError, instead of waiting forever."""

    _dplab_cluster: "Watched | None" = None
    _dplab_code = None  # the cell, for execute
    _dplab_look = None  # (when to read the stacks next, CPU seconds then), once some rank is done
    _dplab_error = None  # the StuckRanksError raised while waiting; every later wait raises it again

    def get(self, timeout=None, return_exceptions=None, return_when=None):
        if self._dplab_error is not None:
            raise self._dplab_error
        if return_when is None and self._dplab_cluster is not None:
            self._watch(_deadline(timeout))
            timeout = None if self.ready() else 0
        return super().get(timeout, return_exceptions, return_when)

    def wait(self, timeout=-1, return_when=None):
        """As AsyncResult.wait (True when done; False when `timeout` passed first), but a task
        that can never finish raises StuckRanksError, having stopped the cluster.

        Raising, rather than returning, is what every other way of waiting does: the error
        holds the diagnosis, and returning True (the stopped cluster ends the task) would leave
        the caller an EngineError per rank from get(). wait_interactive() and %%px wait here.
        wait(0), which ready() calls, only looks: it does not wait, so it does not watch.
        """
        if return_when is None and timeout != 0 and self._dplab_cluster is not None:
            if self._dplab_error is not None:
                raise self._dplab_error
            if self._watch(_deadline(timeout)):
                raise KeyboardInterrupt  # the ranks were interrupted and returned: stop the caller too
            timeout = 0
        return super().wait(timeout, return_when)

    def wait_for_output(self, timeout=-1):
        """As AsyncResult.wait_for_output, but a wait without a timeout (%%px's) ends
        OUTPUT_WAIT_S after every rank returned, naming on stderr the ranks whose output
        never said it was complete: ipyparallel would wait for them forever."""
        if self._dplab_cluster is None or (timeout is not None and timeout >= 0):
            return super().wait_for_output(timeout)
        self.wait()  # watched; ready() already holds for %%px
        if super().wait_for_output(OUTPUT_WAIT_S):
            return True
        late = [t for t, f in zip(ipp.result_targets(self), ipp.result_children(self))
                if not getattr(f, "output", f).done()]
        print(f"dplab: rank(s) {', '.join(map(str, late))} returned, but {OUTPUT_WAIT_S:g} s later "
              "ipyparallel had not received the end of their output: what arrived is shown",
              file=sys.stderr)
        return False

    def states(self) -> dict:
        """rank -> None while running, True when it succeeded, else the exception it ended with."""
        return {t: _outcome(f) for t, f in zip(ipp.result_targets(self), ipp.result_children(self))}

    def _watch(self, deadline: float | None) -> bool:
        """Wait until done or `deadline`; stop the cluster and raise if the task can never
        finish. True when an interrupt was passed on to the ranks and they returned."""
        cluster = self._dplab_cluster
        while True:
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                done = AsyncResult.wait(self, 0.1 if left is None else min(0.1, left))
            except KeyboardInterrupt:
                return self._interrupt()
            if cluster.client is not ipp.result_client(self):
                if done:
                    return False
                raise ClusterError("the cluster this task ran on was stopped: run cluster.restart(), then "
                                   "re-run the set-up cells")
            states = self.states()
            if any(_died(s) for s in states.values()):
                self._report_death()
            if done:
                return False
            self._look_for_stuck(states)
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _look_for_stuck(self, states: dict) -> None:
        """Once some rank is done: every stuck_after seconds, read where the running ones are,
        and give up if all of them wait on the others."""
        cluster = self._dplab_cluster
        stuck_after = cluster.settings.stuck_after
        running = [t for t, s in states.items() if s is None]
        failed = {t: describe_error(s) for t, s in states.items() if s not in (None, True)}
        if len(running) == len(states):
            return  # nobody has finished: this may be long, honest work
        now = time.monotonic()
        if self._dplab_look is None:
            self._dplab_look = (now + stuck_after, cluster.cpu_seconds(running))
        next_look, cpu = self._dplab_look
        if now < next_look:
            return
        cpu_now = cluster.cpu_seconds(running)
        wall = now - (next_look - stuck_after)
        idle = {r: r in cpu and r in cpu_now and cpu_now[r] - cpu[r] < 0.05 * wall for r in running}
        where = self.where(running, idle)
        # After a failure, a rank we cannot see into counts as stuck; after a success, it does not.
        blocked = {r: w for r, w in where.items() if w.waiting or (failed and w.waiting is None)}
        if blocked and all(r in blocked for r in running):
            self._give_up(failed, where, stuck_after, interrupted=False)
        self._dplab_look = (now + stuck_after, cpu_now)

    def _interrupt(self) -> bool:
        """Send SIGINT to the running ranks; True when they return, else stop the cluster and raise."""
        cluster = self._dplab_cluster
        running = [t for t, s in self.states().items() if s is None]
        cluster.signal(running, "SIGINT")
        try:
            if AsyncResult.wait(self, INTERRUPT_GRACE_S):
                return True  # released: get() reports each rank's KeyboardInterrupt
        except KeyboardInterrupt:
            pass  # a second press: stop at once
        states = self.states()
        running = [t for t, s in states.items() if s is None]
        failed = {t: describe_error(s) for t, s in states.items() if s not in (None, True)}
        self._give_up(failed, self.where(running), INTERRUPT_GRACE_S, interrupted=True)

    def where(self, ranks: list[int], idle: dict | None = None) -> dict:
        """rank -> Where, for ranks still running this task; idle: rank -> used no CPU lately."""
        stacks = self._dplab_cluster.stacks(ranks)
        idle = idle or {}
        return {r: where_from_stacks(stacks.get(r, ""), self._dplab_code, idle.get(r, False)) for r in ranks}

    def _give_up(self, failed: dict, where: dict, seconds: float, interrupted: bool):
        cluster = self._dplab_cluster
        finished = [t for t, s in self.states().items() if s is True]
        records, saved, said, p = None, [], {}, len(cluster.ranks)
        if getattr(cluster.settings, "flight_recorder", None) and cluster.stacks_folder:
            records, saved, said = flight.collect(cluster.stacks_folder, list(range(p)))  # before the stop
        message = stuck_message(failed, finished, where, seconds, interrupted, cluster.settings,
                                flight_line(saved, p, said))
        error = StuckRanksError(message, failed, where)
        error.flight_records = records
        self._stop_and_raise(error)

    def _report_death(self):
        """Some rank's process died: say which, how and where, and what the others were doing;
        stop the cluster and raise RankDiedError."""
        cluster = self._dplab_cluster
        # mpiexec ends the other ranks at once; across nodes, the ranks of a node that went down
        # are known only once they miss their heartbeats
        give_up_at = time.monotonic() + DEATH_GRACE_S + cluster.silent_after_s
        while None in (states := self.states()).values() and time.monotonic() < give_up_at:
            time.sleep(0.1)
        died = sorted(t for t, s in states.items() if _died(s))
        last = last_stacks(cluster, died)
        gone = {r: (how_it_died(last[r]), where_from_stacks(last[r], self._dplab_code) if last[r] else None)
                for r in died}
        running = [t for t, s in states.items() if s is None]
        where = self.where(running) if running else {}
        failed = {t: describe_error(s) for t, s in states.items() if s not in (None, True) and not _died(s)}
        finished = [t for t, s in states.items() if s is True]
        hosts = {info.rank: info.host for info in cluster.ranks}
        lost = cluster.unreachable_nodes() if len(set(hosts.values())) > 1 else None
        message = death_message(gone, failed, finished, where, cluster.settings, hosts, lost)
        cluster.mark_lost(lost or [])
        failed.update({r: f"died ({gone[r][0]})" if gone[r][0] else "died" for r in died})
        self._stop_and_raise(RankDiedError(message, failed, where, {r: gone[r][0] for r in died}))

    def _stop_and_raise(self, error: StuckRanksError):
        self._dplab_error = error
        self._dplab_cluster.stop()
        raise error


class Watched(Protocol):
    """What the watch needs of the cluster it watches (`dplab.cluster.handle.Cluster` is one)."""

    settings: object                 # dplab.cluster.settings.Settings: p, stuck_after, ...
    ranks: list                      # one engine.RankInfo per rank, in rank order
    client: object                   # the ipyparallel Client; None once stopped
    stacks_folder: str | None        # where the ranks write the stacks they die with
    silent_after_s: float            # how long a silent rank may stay silent

    def cpu_seconds(self, ranks: list[int]) -> dict[int, float]: ...

    def signal(self, ranks: list[int], sig: str) -> None: ...

    def stacks(self, ranks: list[int], timeout: float = 1.5) -> dict[int, str]: ...

    def unreachable_nodes(self) -> list[str] | None: ...

    def mark_lost(self, nodes: list[str]) -> None: ...

    def stop(self) -> None: ...


class WatchedView(ipp.HookedView):
    """The cluster's DirectView: blocking calls watch for ranks that can never finish."""

    def __init__(self, cluster: Watched, client, targets):
        super().__init__(client, targets)
        self._dplab_cluster = cluster

    def hook(self, ar, code):
        """Make the AsyncResult a WatchedResult of this cluster (code: the cell, for execute)."""
        ar = ipp.adopt(ar, WatchedResult)
        ar._dplab_cluster = self._dplab_cluster
        ar._dplab_code = code
        return ar
