"""The profiler checks of Labs 4 and 8 on real traces: they pass the run they belong to and
fail a trace of another run, another cap's trace, and a delay on another rank; a missing or
truncated trace says what to rerun."""
import json
import os
import shutil

import pytest

from dplab.cluster.jobs import run_job
from dplab.profiles import TraceFileError, check_traces, open_traces

HERE = os.path.dirname(__file__)
RUN = "run-under-test"
RERUN = "rerun the profiling cell"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiles")
    job = run_job(os.path.join(HERE, "mpi", "profile_runs.py"), 2, (out, RUN), timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "USDT" not in job.stderr  # kineto_quiet keeps the profiler's C++ log out
    return out


def _timeline(out, cap):
    from labcode.overlap_timing import timeline_facts

    events = []
    for r in (0, 1):
        with open(out / f"events{r}.json") as f:
            events += json.load(f)[str(cap)]
    return timeline_facts(events)


def _profiled(out, cap):
    from labcode.overlap_timing import timeline_facts
    from labcode.profiling import profiler_events

    analysis = open_traces(str(out / f"cap{cap}"), range(2), RUN, RERUN)
    return timeline_facts([e for r in (0, 1) for e in profiler_events(analysis, r)])


def test_lab4_profile_agrees_with_its_own_timeline_and_not_with_another_caps(traces):
    from labcode.profiling import check_profile

    got = check_profile(_timeline(traces, 5), _profiled(traces, 5), 5)
    assert got["overlap"][0] > 0.3  # several buckets: much of the all-reduce under backward
    check_profile(_timeline(traces, 50), _profiled(traces, 50), 1)
    # broken: the one-bucket run's trace read as the 5 MiB run's (its bucket count set right,
    # so that the comparison of the figures is what fails)
    with pytest.raises(AssertionError, match="overlap"):
        check_profile(_timeline(traces, 5), _profiled(traces, 50), 1)
    with pytest.raises(AssertionError, match="all-reduces a step"):
        check_profile(_timeline(traces, 5), _profiled(traces, 50), 5)


def test_a_trace_of_another_run_is_refused(traces):
    with pytest.raises(TraceFileError, match=f"another run.*{RERUN}"):
        check_traces(str(traces / "cap5"), range(2), "some-other-run", RERUN)


def test_missing_truncated_or_misplaced_traces_say_what_to_rerun(traces, tmp_path):
    folder = tmp_path / "cap5"
    shutil.copytree(traces / "cap5", folder)
    with pytest.raises(TraceFileError, match=f"no profiler trace for rank 2 .*{RERUN}"):
        check_traces(str(folder), range(3), RUN, RERUN)
    text = (folder / "rank1.json").read_text()
    (folder / "rank1.json").write_text(text[: len(text) // 2])
    with pytest.raises(TraceFileError, match=f"rank 1 .* truncated or not JSON .*{RERUN}"):
        open_traces(str(folder), range(2), RUN, RERUN)
    shutil.copy(folder / "rank0.json", folder / "rank1.json")
    with pytest.raises(TraceFileError, match="another rank's trace"):
        check_traces(str(folder), range(2), RUN, RERUN)


def test_lab8_idle_points_to_the_slowed_rank_and_not_to_another(traces):
    from labcode.stragglers import STRAGGLER_D, check_straggler_idle, idle_per_rank

    analysis = open_traces(str(traces / "straggler"), range(2), RUN, RERUN)
    idle = idle_per_rank(analysis, range(2))
    check_straggler_idle(idle, 0, STRAGGLER_D)  # the job slowed rank 0
    with pytest.raises(AssertionError, match="points to rank 0, not rank 1"):
        check_straggler_idle(idle, 1, STRAGGLER_D)  # broken: the delay landed on another rank


def test_open_traces_leaves_the_callers_logging_as_it_was(traces):
    import logging

    root = logging.getLogger()
    before = root.level, list(root.handlers)
    mine = logging.getLogger("test_profiles.mine")
    open_traces(str(traces / "cap5"), range(2), RUN, RERUN)
    assert (root.level, list(root.handlers)) == before and not mine.disabled
    assert logging.getLogger("hta").level == logging.ERROR


PARSE_FOREVER = """\
import sys
from dplab.profiles import open_traces
while True:  # HTA parses the ranks' traces in a pool of forked workers, each time
    open_traces(sys.argv[1], range(2), sys.argv[2], "rerun")
"""


def test_a_kernel_killed_while_hta_parses_leaves_no_worker_of_its_pool(traces):
    """A learner's kernel SIGKILLed while Lab 4 or 8 reads its traces with HTA (Lab 4's
    open_traces): HTA's forked workers end with it (on a closed pipe), within seconds."""
    import subprocess
    import sys

    import psutil

    from tests.support.processes import outlived_sigkill

    kernel = subprocess.Popen([sys.executable, "-c", PARSE_FOREVER, str(traces / "cap5"), RUN])

    def parsing() -> bool:  # its pool's workers are up
        assert kernel.poll() is None, "the parsing process ended by itself"
        try:
            return bool(psutil.Process(kernel.pid).children())
        except psutil.NoSuchProcess:
            return False

    assert outlived_sigkill(kernel, parsing, "HTA's pool", gone_s=10) == set()


def test_kineto_quiet_hides_the_cycle_note_and_no_other_warning():
    """The profiler's one-cycle note, which torch 2.12.1 gives as every profile starts (and
    which nbval then saw as stderr), is hidden inside kineto_quiet; the learner's own warnings
    inside it, and the same note outside it, still show."""
    import warnings

    from dplab.profiles import kineto_quiet

    note = ("Warning: Profiler clears events at the end of each cycle.Only events from the current "
            "cycle will be reported.To keep events across cycles, set acc_events=True.")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with kineto_quiet():
            warnings.warn(note, UserWarning)
            warnings.warn("the learner's own warning", UserWarning)
        warnings.warn(note, UserWarning)
    assert [str(w.message) for w in seen] == ["the learner's own warning", note]
