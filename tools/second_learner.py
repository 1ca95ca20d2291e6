"""Run a command with a second learner on the node beside it (make test-load's "two"):
`python tools/second_learner.py [--engines N] [--lab NB ...] CMD [ARG ...]`; exits non-zero
when either failed.

The learner runs every timing lab (or the --lab notebooks) in turn, asserts only, in copies of
its own and with its own cluster, on the Python, torch and settings of this environment (with
--engines N, on N engines: make test-torch's ON=two-learners runs every lab at p = 3 so, which
is make test-any-p's p = 3); it starts with the command. Its verdict on each lab is printed as
it comes, then a table of its timing checks' values and bands. It may run on after the command ends, and is waited for (at
most load_labs' CONDITION_TIMEOUT_S from the start). Nothing outlives this process, even when it
is killed with SIGKILL: the command gets SIGKILL with it (PR_SET_PDEATHSIG), and the learner
stops its labs when its parent goes (load_labs.run_learner).
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_labs  # noqa: E402  (scripts beside this one)
import run_labs  # noqa: E402
from dplab.cluster.errors import ClusterError  # noqa: E402
from dplab.cluster.processes import on_parent_death  # noqa: E402
from dplab.cluster.settings import Settings  # noqa: E402


def main(argv: list[str]) -> int:
    labs, env = [], {}
    while argv[:1] in (["--lab"], ["--engines"]) and len(argv) > 1:
        if argv[0] == "--lab":  # the learner's labs, instead of every timing lab
            labs.append(Path(argv[1]).resolve())
        else:  # checked as the labs' clusters check DPLAB_ENGINES, before anything starts
            try:
                env["DPLAB_ENGINES"] = str(Settings.read("p", argv[1]))
            except ClusterError as e:
                sys.exit(f"second_learner.py: --engines {argv[1]}: {e}")
        argv = argv[2:]
    if not argv:
        sys.exit("usage: python tools/second_learner.py [--engines N] [--lab NB ...] CMD [ARG ...]: the command to run "
                 "beside a learner")
    if shutil.which(argv[0]) is None:
        sys.exit(f"second_learner.py: {argv[0]!r} is not a command: give the command to run and its arguments")
    missing = [str(lab) for lab in labs if not lab.is_file()]
    if missing:
        sys.exit(f"second_learner.py: no such notebook: {', '.join(missing)}")
    labs = labs or load_labs.timing_labs()
    learner = load_labs.start_learner(labs, env)
    rows: list[dict] = []

    def report() -> None:  # each verdict as it comes
        for line in learner.stdout:
            if line.startswith("{"):
                row = json.loads(line)
                rows.append(row)
                print(f"second learner: {row['lab']}: {row['result']}", flush=True)

    t0 = time.monotonic()
    reader = threading.Thread(target=report, daemon=True)
    reader.start()
    try:
        rc = subprocess.run(argv, preexec_fn=on_parent_death(signal.SIGKILL)).returncode
        print(f"second learner: the command ended ({'ok' if rc == 0 else f'exit {rc}'}); waiting for "
              f"the learner's labs (at most {load_labs.CONDITION_TIMEOUT_S} s in all)", flush=True)
        learner.wait(timeout=max(1.0, load_labs.CONDITION_TIMEOUT_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        pass
    finally:
        run_labs.kill_tree(learner.pid)
        reader.join(timeout=10)
    rows = load_labs.with_unfinished(rows, labs)
    for row in rows:
        row["learner"] = 0
    print()
    load_labs.print_table(load_labs.table(labs, {"second learner": rows}))
    failed = [row["lab"] for row in rows if not load_labs.passed(row["result"])]
    print(f"second learner: {len(rows) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""), flush=True)
    return rc or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
