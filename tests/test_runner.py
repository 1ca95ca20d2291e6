"""booktools.run, the runner behind make test-labs ON=... (and its old targets), on tiny synthetic
notebooks: each verdict as it comes, the limits, copies of the labs, the second learner, nbval's
environment, refusals before anything starts, and nothing left after a SIGKILL."""
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
import pytest

from booktools.labs import lab
from booktools.run import chosen_labs, main, times_things
from dplab.cluster.settings import DEFAULT_ENGINES
from tests.support.processes import descendants, running_command, wait_until_gone

ROOT = Path(__file__).resolve().parent.parent
IN_BAND = "from dplab.timing import in_band\nassert in_band('a check', 1.0, 0.5, 2.0)"


def notebook(path: Path, *sources: str, reads: tuple[str, ...] = (), outputs: dict | None = None) -> Path:
    """A notebook of code cells; outputs: {cell index: stored text}, for nbval to compare."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    for index, text in (outputs or {}).items():
        nb.cells[index].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    if reads:
        nb.metadata["dplab"] = {"reads": list(reads)}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def runner(*args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "booktools.run", *map(str, args)], cwd=ROOT,
                            env={**os.environ, **(env or {})}, **popen)


def run(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = runner(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for(find, timeout: float = 120.0):
    """Poll find() until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not found within {timeout} s")


# -- two passes at their limits, run at once (each mostly waits) -------------------------------

LIMIT_S = 15  # an asserts-only pass: a kernel runs the first lab, then the second sleeps
NBVAL_LIMIT_S = 25  # an nbval pass: pytest and nbval start too


@dataclass
class Ended:
    """What a runner said, in its output and its log, and how long it took."""

    out: str
    log: list[str]
    took: float


@pytest.fixture(scope="module")
def at_their_limits(tmp_path_factory):
    """At p = 3 within LIMIT_S: a lab that passes, one still running at the limit, one left. And
    nbval within NBVAL_LIMIT_S: a lab whose stored output differs, then one that starts a process
    and sleeps. Also: what the nbval pass's log said once that process ran, and whether it outlived
    the pass."""
    tmp = tmp_path_factory.mktemp("limits")
    labs = [notebook(tmp / "labs" / "a_fine.ipynb", "import os\nassert os.environ['DPLAB_ENGINES'] == '3'"),
            notebook(tmp / "labs" / "c_slow.ipynb", "import time\ntime.sleep(600)"),
            notebook(tmp / "labs" / "d_after.ipynb", "x = 1")]
    stored = notebook(tmp / "nbval" / "a_stored.ipynb", "print('computed')", outputs={0: "stored\n"})
    sleepy = notebook(tmp / "nbval" / "b_sleepy.ipynb",
                      "import subprocess, time\n"
                      "child = subprocess.Popen(['sleep', '601'])  # a process the lab started\n"
                      "time.sleep(600)")
    logs = tmp / "log" / "asserts.log", tmp / "log" / "nbval.log"
    before = descendants()
    t0 = time.monotonic()
    procs = [runner("--on", "p=3", "--timeout", LIMIT_S, "--log", logs[0], *labs,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
             runner("--on", "quiet", "--timeout", NBVAL_LIMIT_S, "--log", logs[1], stored, sleepy,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    said_when_it_ran = wait_for(lambda: running_command(["sleep", "601"]) and logs[1].read_text())
    ended = []
    for proc, log in zip(procs, logs):
        out, _ = proc.communicate(timeout=120)
        ended.append(Ended(out, log.read_text().splitlines(), time.monotonic() - t0))
    return (*ended, said_when_it_ran, running_command(["sleep", "601"]), before)


def test_each_verdict_is_logged_as_it_comes_and_the_limit_holds(at_their_limits):
    """A run killed at its limit still says what ran: each verdict is in the log as the lab ends;
    past --timeout no cell runs, and the labs left say they were not started."""
    asserts, _, _, _, before = at_their_limits
    lines = asserts.log
    verdicts = [line for line in lines if ".ipynb [p=3]: " in line]
    assert verdicts[0].startswith("a_fine.ipynb [p=3]: ok ("), lines
    assert verdicts[1].startswith(f"c_slow.ipynb [p=3]: FAIL: not finished within the {LIMIT_S} s limit"), lines
    assert verdicts[2] == f"d_after.ipynb [p=3]: FAIL: not started within the {LIMIT_S} s limit", lines
    assert lines[-1] == "1 passed, 2 failed", lines
    # the failures again at the end, where CI's tail shows them
    assert lines[-3:-1] == ["FAILED " + verdicts[1], "FAILED " + verdicts[2]], lines
    assert asserts.took < LIMIT_S + 45, f"the limit did not hold: {asserts.took:.0f} s"
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def test_an_nbval_pass_past_its_limit_is_killed_whole_and_compares_the_stored_outputs(at_their_limits):
    _, nbval, said_when_it_ran, left, before = at_their_limits
    # the first lab's verdict came as it ended, before the pass did
    assert "a_stored.ipynb [quiet]: FAIL Cell 0" in said_when_it_ran, said_when_it_ran
    assert f"b_sleepy.ipynb [quiet]: FAIL: not finished within the {NBVAL_LIMIT_S} s limit" in nbval.out, nbval.out
    assert nbval.log[-1] == "0 passed, 2 failed", nbval.log
    assert nbval.took < NBVAL_LIMIT_S + 30, f"the limit did not hold: {nbval.took:.0f} s"
    assert left == [], "the pass's processes outlived it"
    assert wait_until_gone(descendants() - before, timeout=5) == set()


# -- the second learner ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def learners(tmp_path_factory):
    """nbval beside a second learner at p = 3, with DPLAB_BACKEND set in the shell: one lab that
    passes anywhere, one that passes only at the default p."""
    tmp = tmp_path_factory.mktemp("learners")
    fine = notebook(tmp / "labs" / "fine.ipynb",
                    "import os\nassert os.environ['DPLAB_DEVICE'] == 'cpu'\n"
                    "assert 'DPLAB_BACKEND' not in os.environ, 'the shell setting reached the pass'", IN_BAND)
    default = notebook(tmp / "labs" / "p_default.ipynb",
                       f"import os\nassert os.environ.get('DPLAB_ENGINES', '{DEFAULT_ENGINES}') == "
                       f"'{DEFAULT_ENGINES}', os.environ['DPLAB_ENGINES']")
    before = descendants()
    out = run("--on", "two=3", fine, default, env={"DPLAB_BACKEND": "mpi"})
    return out, before


def test_second_learner_runs_its_labs_on_the_engines_it_is_given(learners):
    # make test-torch ON=two-learners counts this learner as make test-any-p's p = 3
    out, _ = learners
    assert "p_default.ipynb [two=3]: ok" in out.stdout, "the nbval pass runs at the default p"
    assert "p_default.ipynb [two=3: second learner]: FAIL code cell 1: AssertionError: 3" in out.stdout, out.stdout


def test_a_pass_fails_when_its_second_learner_fails(learners):
    out, before = learners
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r"^== two=3: FAILED: 3 passed in .*; second learner: 1 passed, 1 failed \(p_default.ipynb\)$",
                     out.stdout, re.M), out.stdout
    assert wait_until_gone(descendants() - before, timeout=10) == set()


def test_an_nbval_pass_and_its_learner_run_on_the_cpu_without_the_shells_settings(learners):
    out, _ = learners
    assert "fine.ipynb [two=3]: ok" in out.stdout and "fine.ipynb [two=3: second learner]: ok" in out.stdout, out.stdout


def test_table_names_the_failing_cell_and_passes_the_condition(learners):
    out, _ = learners
    table = out.stdout[out.stdout.index("lab / check"):].splitlines()
    assert re.fullmatch(r"p_default +\| ok \(\d+ s\) +\| FAIL code cell 1: AssertionError: 3", table[4]), table


def test_the_table_shows_each_timing_checks_value_and_band(learners):
    out, _ = learners
    row = next(line for line in out.stdout.splitlines() if line.startswith("  a check"))
    assert row.count("1 in [0.5, 2]") == 2, row  # the pass's, and its learner's


def test_a_pass_and_its_second_learner_each_write_their_own_artifacts(tmp_path):
    """Runs at once must not share labs/artifacts/: Lab 4 saves a checkpoint there and reads it
    back. Each copy has the files its lab reads outside labs/ (Lab 5 runs ../chapters/ddp_train.py)."""
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "ddp_train.py").write_text("")
    seen = tmp_path / "seen.txt"
    writer = notebook(tmp_path / "labs" / "writer.ipynb",
                      "import os, time\n"
                      f"open({str(seen)!r}, 'a').write(os.environ['DPLAB_ENGINES'])\n"
                      "os.makedirs('artifacts', exist_ok=True)\n"
                      "open('artifacts/mine.txt', 'w').write(os.environ['DPLAB_ENGINES'])\n"
                      "time.sleep(3)  # the other learner writes meanwhile\n"
                      "assert open('artifacts/mine.txt').read() == os.environ['DPLAB_ENGINES'], 'overwritten'\n"
                      "assert os.path.isfile('../chapters/ddp_train.py')  # what it reads beside labs/",
                      reads=("chapters/ddp_train.py",))
    out = run("--on", "p=2,two=3", writer)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(seen.read_text()) == ["2", "3"], "the pass and its learner did not run at their p"
    assert not (writer.parent / "artifacts").exists(), "a copy wrote beside the original lab"


# -- nothing left after a SIGKILL ------------------------------------------------------------

def test_runner_killed_with_sigkill_leaves_nothing_it_started(tmp_path):
    """nbval's kernel, the second learner's, the children of both labs, and the busy core."""
    lab = notebook(tmp_path / "labs" / "sleepy.ipynb",
                   "import subprocess, time\nchild = subprocess.Popen(['sleep', '302'])\ntime.sleep(600)")
    before = descendants()
    # TMPDIR: the second learner's folder, which a SIGKILL leaves no one to remove, is the test's
    proc = runner("--on", "two,busy", lab, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                  env={"TMPDIR": str(tmp_path)})
    wait_for(lambda: len(running_command(["sleep", "302"])) == 2)  # the pass's lab and the learner's
    started = psutil.Process(proc.pid).children(recursive=True)
    assert any("sum(range" in " ".join(p.cmdline()) for p in started), "no busy core beside the pass"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_until_gone({p.pid for p in started}, timeout=20) == set(), "a process outlived the runner"
    assert running_command(["sleep", "302"]) == []
    assert wait_until_gone(descendants() - before, timeout=5) == set()


# -- refusals and choices, before anything starts -------------------------------------------------

def test_gpu_run_without_a_gpu_refuses_before_starting_anything(tmp_path):
    before = descendants()
    out = run("--on", "gpu", notebook(tmp_path / "x.ipynb", "x = 1"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no GPU is visible" in out.stderr and "nothing was started" in out.stderr
    assert wait_until_gone(descendants() - before, timeout=5) == set()


def test_refusals_name_what_to_do_and_start_nothing(tmp_path, capsys):
    before = descendants()
    for args, says in [
        (["--on", "p=3,p=2 p=1 two,gpu", str(tmp_path / "missing.ipynb")], "p given twice in one pass"),
        ([str(tmp_path / "missing.ipynb"), "--on", "p=3"], "no such notebook"),
        (["--on", f"two {ROOT / 'labs' / '04_ddp.ipynb'}"], "name the notebooks apart from --on's passes"),
        (["--on", "p=1", "p=3"], 'give --on its passes as one word: --on "p=1 p=3"'),
        (["--on", "p=3", "--labs", "42"], "no lab numbered 42"),
    ]:
        assert main(args) == 2
        assert says in capsys.readouterr().err, args
    assert descendants() - before == set()


def test_the_timing_labs_are_those_that_call_in_band():
    timing = [x.stem[:2] for x in chosen_labs("timing", [])]
    assert "04" in timing and "00" not in timing, timing
    assert times_things(lab("04")) and not times_things(lab("00"))
    assert [x.stem[:2] for x in chosen_labs("02,06", [])] == ["02", "06"]


def test_the_plan_says_what_each_pass_runs_and_starts_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DPLAB_BACKEND", "mpi")
    before = descendants()
    assert main(["--on", "p=3 other-cpu,busy", "--plan", str(notebook(tmp_path / "x.ipynb", "x = 1"))]) == 0
    first, second = capsys.readouterr().out.split("\nother-cpu,busy: ")
    assert "asserts only" in first and "DPLAB_ENGINES=3" in first and "removed" not in first
    assert "nbval" in second and "DPLAB_DEVICE=cpu" in second and "removed: DPLAB_BACKEND" in second
    assert "--nbval-cell-timeout=" in second and "tests/nbval_sanitize.cfg" in second
    assert descendants() - before == set()


# -- the old paths ------------------------------------------------------------------------------

@pytest.mark.parametrize("tool, new", [
    ("run_labs.py", "booktools/run.py"), ("load_labs.py", "booktools/run.py"),
    ("second_learner.py", "booktools/conditions.py"), ("busy_core.py", "booktools/conditions.py"),
    ("execute_labs.py", "booktools/store.py"), ("torch_release.py", "booktools/releases.py"),
])
def test_each_old_tool_is_a_thin_alias_that_says_where_it_went(tool, new):
    text = (ROOT / "tools" / tool).read_text()
    assert text.startswith(f'"""Moved to {new}'), text[:80]
    assert len(text.splitlines()) <= 45, f"tools/{tool} is no longer thin"
    # importable without running anything: the intro page loads two of them by their path
    spec = importlib.util.spec_from_file_location(tool[:-3], ROOT / "tools" / tool)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_intro_page_still_finds_any_p_and_the_torch_record_in_the_old_paths():
    found = {}
    for tool in ("run_labs", "torch_release"):
        spec = importlib.util.spec_from_file_location(tool, ROOT / "tools" / f"{tool}.py")
        found[tool] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(found[tool])
    assert [env["DPLAB_ENGINES"] for env in found["run_labs"].ANY_P.values()] == ["1", "3"]
    assert found["torch_release"].RESULT_LINE.match("torch 2.8.0 on other-cpu: 1 passed in 1.0s | today")


def test_badly_written_setting_is_refused():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "run_labs.py"), "--setting", "p=3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "NAME:VAR=VALUE" in out.stderr


# -- a timing mistake under load (--broken) -------------------------------------------------

def broken_lab(path: Path, new: str) -> Path:
    """A lab whose one timing check reads `t`, and a timing mistake that sets it to `new`."""
    lab_path = notebook(path, "t = 1.0  # what a timing measured", IN_BAND.replace("1.0", "t"))
    nb = nbformat.read(lab_path, as_version=4)
    nb.metadata["dplab"] = {"timing_mistakes": {"slow": {"old": "t = 1.0", "new": f"t = {new}",
                                                         "fails": "a check"}}}
    nbformat.write(nb, lab_path)
    return lab_path


@pytest.mark.parametrize("new, caught", [("5.0", True), ("1.5", False)])
def test_broken_runs_the_mistake_in_a_copy_and_says_whether_its_check_caught_it(tmp_path, new, caught):
    """The mistake is made in the copy only; a value out of the band is caught (exit 0), one that
    stays inside is not (exit 1: the check could not tell it from a correct run)."""
    lab_path = broken_lab(tmp_path / "labs" / "timed.ipynb", new)
    before = lab_path.read_bytes()
    out = run("--on", "quiet", "--broken", "slow", lab_path)
    assert out.returncode == (0 if caught else 1), out.stdout + out.stderr
    said = "caught: slow in timed.ipynb [quiet]: a check: 5 OUT of [0.5, 2]" if caught else \
        "NOT CAUGHT: slow in timed.ipynb [quiet]"
    assert said in out.stdout, out.stdout
    assert lab_path.read_bytes() == before, "the mistake was made in the lab itself"


def test_broken_refuses_a_mistake_no_lab_names_and_a_mistake_that_is_not_in_the_code(tmp_path, capsys):
    from booktools.learners import with_mistake

    lab_path = broken_lab(tmp_path / "labs" / "timed.ipynb", "5.0")
    assert main(["--broken", "fast", str(lab_path)]) == 2
    assert "no lab of --labs all names the timing mistake 'fast' (known: slow)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="stands 0 times"):
        with_mistake(lab_path.read_bytes(), "t = 2.0", "t = 3.0", "timed.ipynb")
    nb = nbformat.read(lab_path, as_version=4)
    nb.metadata["dplab"]["timing_mistakes"]["slow"]["old"] = "t = 2.0"
    nbformat.write(nb, lab_path)
    assert main(["--broken", "slow", str(lab_path)]) == 2
    assert "timed.ipynb: the mistake's old text stands 0 times in the code cells, not once: correct its " \
           "timing_mistakes entry" in capsys.readouterr().err


def test_broken_runs_several_labs_mistakes_in_one_pass_and_refuses_two_in_one_lab(tmp_path, capsys):
    """Comma-joined names make each lab's own mistake in one pass; two in one lab are refused
    before anything starts (the lab would stop at the first one's check)."""
    first = broken_lab(tmp_path / "labs" / "timed.ipynb", "5.0")
    second = broken_lab(tmp_path / "labs" / "timed_too.ipynb", "0.1")
    nb = nbformat.read(second, as_version=4)
    nb.metadata["dplab"]["timing_mistakes"] = {"fast": nb.metadata["dplab"]["timing_mistakes"]["slow"]}
    nbformat.write(nb, second)
    out = run("--on", "quiet", "--broken", "slow,fast", first, second)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "caught: slow in timed.ipynb [quiet]: a check: 5 OUT of [0.5, 2]" in out.stdout
    assert "caught: fast in timed_too.ipynb [quiet]: a check: 0.1 OUT of [0.5, 2]" in out.stdout
    nb.metadata["dplab"]["timing_mistakes"]["slow"] = nb.metadata["dplab"]["timing_mistakes"]["fast"]
    nbformat.write(nb, second)
    assert main(["--broken", "slow,fast", str(second)]) == 2
    assert "timed_too.ipynb names fast, slow: one mistake per lab in a run" in capsys.readouterr().err


def test_the_caught_line_is_what_caught_says():
    """The closing page reads broken_timing.txt with CAUGHT_LINE: it matches the line `caught`
    writes for a run that caught its mistake, and not the NOT CAUGHT one."""
    from booktools.labs import TimingMistake
    from booktools.learners import Row
    from booktools.run import CAUGHT_LINE, caught

    said = []
    row = Row("timed.ipynb", "busy", "FAIL code cell 1: AssertionError",
              {"a check": {"value": 5.0, "low": 0.5, "high": 2.0}})
    mistake = TimingMistake("slow", "t = 1.0", "t = 5.0", "a check")
    caught({"timed.ipynb": mistake}, [row], said.append)
    assert CAUGHT_LINE.findall("\n".join(said)) == [("slow", "busy")]
    assert CAUGHT_LINE.findall("NOT CAUGHT: slow in timed.ipynb [busy]: a check") == []
