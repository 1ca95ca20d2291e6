"""Grade a whole class: every learner's notebook in a folder, each a separate, bounded run of
teach.grade with its own cluster, learners' code sandboxed (teach.sandbox).

    python -m teach.grade_class DIR [--out DIR/_grades] [--where auto|slurm|local] [--engines 2]
    make grade-class DIR=submitted

DIR holds one folder per learner, named by their id, with their notebooks at any depth below
it, named as the labs (nbgrader's submitted/ folder is such a DIR: submitted/ID/LAB/LAB.ipynb).
Where a SLURM controller answers (sinfo, with the shell's SLURM_CONF), each notebook is a job of
its own (sbatch, one node, --time from --timeout), and the jobs run at once as the nodes allow;
otherwise the runs go one after another on this machine. Each run's kernel is the unprivileged
account's and sees neither DIR, nor the nbgrader course DIR is in, nor the labs; the grader
stays outside it. In OUT:
- grades.csv, with the columns of `nbgrader export`'s CSV, one row per learner and lab;
- ID.txt, a report per learner: each check's verdict, points and message;
- ID/LAB.json, each run's report (teach.grade --json), and logs/ for SLURM's output;
- class.txt: the scores, and the class's wall time against the sum of its runs' times.
Nothing is left: the jobs are cancelled and every process each run started is ended.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import nbformat

from booktools.labs import lab, labs
from booktools.notebooks import CELL_TIMEOUT_S, NOTEBOOK_TIMEOUT_S
from booktools.pages import ROOT
from teach import grade
from teach import sandbox as sandboxing

MARGIN_S = 60  # beyond a run's own limit: its cluster's start, the reaping of what it left
CSV_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
               "email", "raw_score", "late_submission_penalty", "score", "max_score"]


def submissions(folder: Path, out: Path) -> list[tuple[str, Path]]:
    """(learner id, notebook) for every notebook named as a lab, in learner order; SystemExit on
    a folder with none, or a notebook at DIR's top level (whose learner is it?)."""
    names = {each.name for each in labs()}
    found, strays = [], []
    for path in sorted(folder.rglob("*.ipynb")):
        if out in path.parents or ".ipynb_checkpoints" in path.parts:
            continue
        rel = path.relative_to(folder)
        if len(rel.parts) < 2:
            raise SystemExit(f"grade-class: {path} is not in a learner's folder: put each learner's "
                             f"notebooks in {folder}/ID/")
        if path.name in names:
            found.append((rel.parts[0], path))
        else:
            strays.append(str(rel))
    if not found:
        raise SystemExit(f"grade-class: no notebook named as a lab under {folder}/ID/ (names as "
                         "`make student` gave them, e.g. 02_data_parallel_by_hand.ipynb)")
    if strays:
        print(f"grade-class: not graded, not named as a lab: {', '.join(strays)}", file=sys.stderr)
    return found


def slurm_answers() -> bool:
    if not shutil.which("sbatch") or not os.environ.get("SLURM_CONF"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def hidden(folder: Path, extra: list[Path]) -> list[Path]:
    """What the learners' code must not see: DIR, its nbgrader course (gradebook, source,
    release: DIR's parent when it holds gradebook.db or nbgrader_config.py) and --hide."""
    course = folder.parent
    is_course = any((course / name).exists() for name in ("gradebook.db", "nbgrader_config.py"))
    return [folder, *([course] if is_course else []), *(p.resolve() for p in extra)]


def grade_command(notebook: Path, report: Path, args, hide: list[Path]) -> list[str]:
    cmd = [sys.executable, "-m", "teach.grade", str(notebook), "--json", str(report),
           "--timeout", str(args.timeout), "--cell-timeout", str(args.cell_timeout)]
    if not args.no_sandbox:
        cmd += ["--sandbox", *(a for path in hide for a in ("--hide", str(path)))]
    return cmd


def run_local(runs: list[tuple[str, Path, Path]], args, hide: list[Path], env: dict) -> None:
    """One run after another, each bounded; its process group killed if it overruns."""
    for who, notebook, report in runs:
        log = report.with_suffix(".log")
        with open(log, "w") as out:
            proc = subprocess.Popen(grade_command(notebook, report, args, hide), env=env, cwd=ROOT,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                proc.wait(timeout=args.timeout + MARGIN_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        print(f"  {who}/{notebook.name}: done", flush=True)


def run_slurm(runs: list[tuple[str, Path, Path]], args, hide: list[Path], env: dict, logs: Path) -> None:
    """One job per notebook, all submitted at once; wait for them, bounded; cancel what is left."""
    tag = f"dplab-grade-{uuid.uuid4().hex[:8]}"
    minutes = max(1, -(-int(args.timeout + MARGIN_S) // 60))
    deadline = time.monotonic() + len(runs) * (args.timeout + MARGIN_S)  # if they ran one by one
    try:
        for i, (who, notebook, report) in enumerate(runs):
            cmd = " ".join(shlex.quote(a) for a in grade_command(notebook, report, args, hide))
            subprocess.run(["sbatch", "--parsable", f"--job-name={tag}", "--nodes=1", "--ntasks=1",
                            f"--cpus-per-task={args.cpus}", f"--time={minutes}",
                            f"--output={slurm_log(logs, i, who)}", f"--chdir={ROOT}",
                            "--export=ALL", f"--wrap=exec {cmd}"],
                           check=True, capture_output=True, text=True, env=env, timeout=30)
        print(f"  {len(runs)} jobs submitted as {tag}", flush=True)
        while time.monotonic() < deadline:
            left = subprocess.run(["squeue", "-h", f"--name={tag}", "-o", "%i"], capture_output=True,
                                  text=True, timeout=30).stdout.split()
            if not left:
                break
            time.sleep(2)
    finally:
        subprocess.run(["scancel", f"--name={tag}"], capture_output=True, timeout=30)
        end = time.monotonic() + 30
        while time.monotonic() < end and subprocess.run(
                ["squeue", "-h", f"--name={tag}", "-o", "%i"], capture_output=True, text=True,
                timeout=30).stdout.strip():
            time.sleep(1)


def slurm_log(logs: Path, i: int, who: str) -> Path:
    """Where SLURM writes the output of run i, learner who's."""
    return logs / f"{i:03d}-{who}.out"


def load_report(notebook: Path, report: Path, log: Path) -> grade.Report:
    """A run's report; where the run left none, one whose checks (the lab's) did not run, and
    that says why, with the end of the run's output (`log`)."""
    if report.is_file():
        try:
            return grade.read_json(report)
        except (ValueError, TypeError, KeyError):
            pass
    said = log.read_text(errors="replace")[-600:] if log.is_file() else ""
    ours = nbformat.read(lab(notebook.name).path, as_version=4)
    return grade.Report(notebook.name, grade.checks(ours), stopped="the grading run ended without a report "
                        "(killed at its time limit?)" + (f"; it said:\n{said}" if said else ""))


def learner_text(who: str, reports: list[grade.Report]) -> str:
    """One learner's reports, as teach.grade prints each."""
    return "\n".join([who, *(textwrap.indent(grade.render(r), "  ") for r in reports)]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="one folder per learner, with their notebooks")
    ap.add_argument("--out", type=Path, help="reports and grades.csv (default DIR/_grades)")
    ap.add_argument("--where", choices=["auto", "slurm", "local"], default="auto",
                    help="SLURM jobs, or runs one after another here (auto: SLURM if it answers)")
    ap.add_argument("--engines", type=int, default=2, help="engines per run (default 2)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs per SLURM job (default 2)")
    ap.add_argument("--timeout", type=float, default=NOTEBOOK_TIMEOUT_S, help="seconds per notebook")
    ap.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S, help="seconds per cell")
    ap.add_argument("--no-sandbox", action="store_true", help="run learners' code as yourself")
    ap.add_argument("--hide", type=Path, action="append", default=[], metavar="FOLDER",
                    help="another folder the learners' code must not see (DIR, and its nbgrader "
                         "course, are hidden anyway)")
    args = ap.parse_args()
    folder = args.dir.resolve()
    if not folder.is_dir():
        ap.error(f"no such folder: {args.dir}")
    if not 1 <= args.engines <= 8 or args.cpus < 1 or args.timeout <= 0 or args.cell_timeout <= 0:
        ap.error("--engines takes 1 to 8, --cpus 1 or more, the timeouts seconds > 0")
    if not args.no_sandbox and sandboxing.unavailable():
        ap.error(sandboxing.unavailable())
    where = args.where
    if where == "auto":
        where = "slurm" if slurm_answers() else "local"
    elif where == "slurm" and not slurm_answers():
        ap.error("--where slurm: no SLURM controller answers sinfo (is SLURM_CONF set?)")
    out = (args.out or folder / "_grades").resolve()
    try:
        found = submissions(folder, out)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if out.exists():
        shutil.rmtree(out)
    logs = out / "logs"
    logs.mkdir(parents=True)
    os.chmod(out, 0o700)
    runs = []
    for who, notebook in found:
        (out / who).mkdir(exist_ok=True)
        runs.append((who, notebook, out / who / notebook.with_suffix(".json").name))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
    env["DPLAB_ENGINES"] = str(args.engines)
    print(f"grade-class: {len(runs)} notebooks of {len({w for w, _ in found})} learners, "
          f"{'as SLURM jobs' if where == 'slurm' else 'one after another here'}"
          f"{'' if args.no_sandbox else ', sandboxed'}", flush=True)
    t0 = time.monotonic()
    hide = hidden(folder, args.hide)
    if not args.no_sandbox:  # made here, not by every job of a new machine at once
        sandboxing.accounts(len(runs))
    if where == "slurm":
        run_slurm(runs, args, hide, env, logs)
    else:
        run_local(runs, args, hide, env)
    wall = time.monotonic() - t0

    by_learner: dict[str, list[dict]] = {}
    rows = []
    for i, (who, notebook, report) in enumerate(runs):
        r = load_report(notebook, report, slurm_log(logs, i, who) if where == "slurm"
                        else report.with_suffix(".log"))
        by_learner.setdefault(who, []).append(r)
        rows.append({"assignment": notebook.stem, "student_id": who, "raw_score": r.score,
                     "late_submission_penalty": 0.0, "score": r.score, "max_score": r.max_score})
    with open(out / "grades.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, restval="")
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: (r["assignment"], r["student_id"])))
    for who, reports in by_learner.items():
        (out / f"{who}.txt").write_text(learner_text(who, reports))
    serial = sum(r.seconds for rs in by_learner.values() for r in rs)
    summary = [f"{who}: " + ", ".join(f"{r.notebook[:2]} {r.score:g}/{r.max_score:g}" for r in rs)
               for who, rs in by_learner.items()]
    summary.append(f"wall time {wall:.0f} s for {len(runs)} runs "
                   f"({'SLURM jobs' if where == 'slurm' else 'one after another'}); "
                   f"the runs' own times add up to {serial:.0f} s")
    (out / "class.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    print(f"grades: {out / 'grades.csv'}; a report per learner: {out}/ID.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
