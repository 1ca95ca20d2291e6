"""python -m booktools.beside (make test, .ci/run): one command in the background beside
another; nothing of either outlives the run, and either one's failure fails it."""
import os
import subprocess
import sys

import psutil

from tests.support.processes import outlived_sigkill

# the real module, or the broken variant: the background started as a plain child, untethered,
# and not ended when the foreground fails
RUN = ("import subprocess, sys, booktools.beside as b\n"
       "if sys.argv[1] == 'broken':\n"
       "    b.start_tree, b.end_tree = (lambda cmd, **kw: subprocess.Popen(cmd, **kw)), (lambda pid: None)\n"
       "sys.exit(b.run(*b.parse(sys.argv[2:])))")


def sleeps(seconds: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]]


def test_a_failed_foreground_ends_the_background_and_gives_its_status(tmp_path):
    for mode, left in (("real", False), ("broken", True)):
        log = tmp_path / f"{mode}.log"
        done = subprocess.run([sys.executable, "-c", RUN, mode, str(log), "--", "sleep", "307", "--",
                               "bash", "-c", "sleep 1; exit 3"], timeout=60)
        assert done.returncode == 3, mode
        found = sleeps("307")
        for p in found:
            p.kill()
        assert bool(found) == left, mode


def test_a_failed_background_fails_the_run_and_shows_its_printout(tmp_path):
    log = tmp_path / "beside.log"
    done = subprocess.run([sys.executable, "-m", "booktools.beside", str(log), "--",
                           "bash", "-c", "echo the book broke; exit 2", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "the book broke" in done.stdout and "failed beside true" in done.stderr
    done = subprocess.run([sys.executable, "-m", "booktools.beside", str(log), "--", "true", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "passed beside true" in done.stdout


def test_a_run_killed_with_sigkill_leaves_neither_command():
    run = subprocess.Popen([sys.executable, "-m", "booktools.beside", os.devnull, "--", "sleep", "308",
                            "--", "sleep", "309"])
    assert not outlived_sigkill(run, lambda: sleeps("308") and sleeps("309"), "the two commands",
                                timeout=30, gone_s=5)


def test_bad_usage_is_refused_before_anything_starts():
    for args in ([], ["log", "--", "true"], ["log", "true", "--", "true"], ["log", "--", "--", "true"]):
        done = subprocess.run([sys.executable, "-m", "booktools.beside", *args], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode != 0 and "usage: python -m booktools.beside" in done.stderr, args
