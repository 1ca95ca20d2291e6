"""PyTorch profiler traces, one per rank, read back with Holistic Trace Analysis (HTA).

Labs 4 and 8 profile a few steps on every rank with `torch.profiler` and write one Chrome
trace per rank, `rank<r>.json`, tagged with the run that wrote it (`prof.add_metadata(RUN_KEY,
run)`). `open_traces` checks the files before HTA reads them, so that a missing, truncated or
stale trace says what to rerun instead of failing deep inside a parser, and imports HTA
without letting it reconfigure the notebook's logging.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings

#: The top-level key of a trace that names the run that wrote it.
RUN_KEY = "dplab_run"
#: The profiler's note that a second profiling cycle drops the first's events. The labs profile
#: one cycle; some releases (2.12.1 among them) give the note as every profile starts, 2.13
#: only from a second cycle on.
CYCLE_NOTE = r"Warning: Profiler clears events at the end of each cycle"


class TraceFileError(ValueError):
    """A profiler trace that is missing, truncated, or from another run."""


@contextlib.contextmanager
def kineto_quiet():
    """Profile without the profiler's own chatter, which differs between torch releases.
    Kineto, the profiler's C++ side, writes a line to the process's stderr as the profiler
    starts and as it stops (its "USDT" messages, torch 2.13 and later), and no log level turns
    them off (KINETO_LOG_LEVEL=5 does not). Meanwhile this points file descriptor 2 at
    /dev/null: Python's own errors and warnings go through sys.stderr, an object that a
    Jupyter kernel replaces, and still show, all but one: CYCLE_NOTE, which only some releases
    give for a single cycle."""
    null = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(null, 2)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=CYCLE_NOTE, category=UserWarning)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def trace_path(folder: str, rank: int) -> str:
    """Where rank `rank` writes its trace in `folder`."""
    return os.path.join(folder, f"rank{rank}.json")


def check_traces(folder: str, ranks, run: str, rerun: str) -> dict[int, str]:
    """{rank: path} of the traces in `folder`, once each parses and was written by `run` on
    that rank; else TraceFileError, which ends with `rerun` (what to run again)."""
    files = {}
    for r in ranks:
        path = trace_path(folder, r)
        name = os.path.relpath(path) if path.startswith(os.getcwd()) else os.path.basename(path)
        if not os.path.isfile(path):
            raise TraceFileError(f"no profiler trace for rank {r} ({name}): {rerun}")
        try:
            with open(path) as f:
                trace = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceFileError(f"the trace of rank {r} ({name}) is truncated or not JSON "
                                 f"({type(e).__name__}): {rerun}") from None
        if trace.get(RUN_KEY) != run or "traceEvents" not in trace:
            raise TraceFileError(f"the trace of rank {r} ({name}) was written by another run "
                                 f"than the timeline it is compared with: {rerun}")
        if trace.get("distributedInfo", {}).get("rank") != r:
            raise TraceFileError(f"{name} holds another rank's trace: {rerun}")
        files[r] = os.path.abspath(path)  # HTA reads a relative path from its own trace_dir
    return files


def open_traces(folder: str, ranks, run: str, rerun: str):
    """HTA's `TraceAnalysis` of the checked traces (see `check_traces`), every profiler step
    kept. HTA configures logging when imported (its own INFO messages on stdout, and every
    logger that existed before disabled): the notebook's logging is put back as it was, and
    HTA's logger reports errors only."""
    files = check_traces(folder, ranks, run, rerun)
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    loggers = logging.Logger.manager.loggerDict
    enabled = [lg for lg in loggers.values() if isinstance(lg, logging.Logger) and not lg.disabled]
    from hta.trace_analysis import TraceAnalysis  # imported here: only the labs that read traces need it

    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for lg in enabled:
        lg.disabled = False
    logging.getLogger("hta").setLevel(logging.ERROR)  # it logs its parsing times as warnings
    return TraceAnalysis(trace_files=files, include_last_profiler_step=True)


def gpu_kernels(analysis, rank: int) -> int:
    """How many of a rank's events HTA places on a GPU stream: the kernels its temporal
    breakdown and overlap count (a CPU-only trace has none; HTA marks CPU events stream -1)."""
    return int((analysis.t.get_trace(rank)["stream"] >= 0).sum())


def event_times(analysis, rank: int):
    """A rank's events as HTA parsed them: their names, starts and ends in seconds (pandas
    Series on one index). HTA stores a symbol id in its `name` column, and times in µs."""
    df = analysis.t.get_trace(rank)
    symbols = analysis.t.symbol_table.get_sym_table()
    return df["name"].map(symbols.__getitem__), df["ts"] / 1e6, (df["ts"] + df["dur"]) / 1e6
