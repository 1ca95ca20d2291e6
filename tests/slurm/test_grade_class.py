"""make grade-class on the private SLURM cluster (issue 47): 8 learners' notebooks of Lab 2,
mixing the handed-out stubs, solutions, a plausible mistake, a rank that hangs, a kernel that
dies and a notebook that reaches for the instructor's files, graded as one job each, sandboxed.
Every score is right, each learner's report says why, the CSV is nbgrader export's, and no job,
process or run folder is left."""
import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.support import grading as submissions
from tests.support.slurm import job_processes, jobs

ROOT = Path(__file__).resolve().parents[2]
LAB = "02_data_parallel_by_hand.ipynb"
CELL_TIMEOUT_S = 30  # the hanging rank's cell; every other cell of Lab 2 takes a few seconds
REASON = None if os.environ.get("DPSLURM_DIR") else "no private SLURM cluster (make test-slurm starts one)"

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def class_of(folder: Path) -> dict[str, float]:
    """Write the 8 submissions; each learner's expected score."""
    from tests.support.grading import mistakes

    _, mistake = mistakes()["gradients summed, not averaged"]
    cell, old, new, checks = mistake.cell, mistake.old, mistake.new, mistake.fails
    mistaken = submissions.solved(LAB)
    target = mistaken.cells[submissions.index_of(mistaken, cell)]
    target.source = target.source.replace(old, new)
    full = submissions.points(LAB)
    before_ex4 = submissions.points_before(LAB, "lab2-ex4-running-stats")
    edited = submissions.solved(LAB)
    check = edited.cells[submissions.index_of(edited, "lab2-check-broadcast")]
    check.source = "pass  # the learner emptied the check"
    work = {
        "ada": (submissions.handed_out(LAB), 0),
        "bob": (submissions.solved(LAB), full),
        "cyd": (mistaken, full - submissions.points(LAB, checks)),
        "dee": (submissions.with_cell(submissions.solved(LAB), "lab2-ex4-running-stats",
                                      "%%px\nimport time\nif rank == 1:\n    time.sleep(600)"), before_ex4),
        "eve": (submissions.with_cell(submissions.solved(LAB), "lab2-ex4-running-stats",
                                      "import os\nos._exit(1)"), before_ex4),
        "fay": (submissions.with_cell(submissions.solved(LAB), "lab2-check-broadcast", submissions.probe({
            "the gradebook": ("r", str(folder.parent / "gradebook.db")),
            "another learner's submission": ("r", str(folder / "bob" / LAB)),
            "labs/": ("r", str(ROOT / "labs" / LAB))})), full),
        "gus": (edited, full),  # graded with the lab's own check
        "hal": (submissions.solved(LAB), full),
    }
    for who, (nb, _) in work.items():
        (folder / who).mkdir(parents=True)
        nbformat.write(nb, folder / who / LAB)
    (folder.parent / "gradebook.db").write_text("an nbgrader course's gradebook\n")
    return {who: score for who, (_, score) in work.items()}


def test_a_class_of_eight_is_graded_as_jobs_each_score_right_and_nothing_left():
    base = Path(f"/var/tmp/dplab-class-{os.getpid()}")
    folder = base / "submitted"
    try:
        expected = class_of(folder)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "teach.grade_class", str(folder),
                               "--where", "slurm", "--cell-timeout", str(CELL_TIMEOUT_S),
                               "--timeout", "300"], capture_output=True, text=True, timeout=900)
        wall = time.monotonic() - t0
        print(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "as SLURM jobs, sandboxed" in done.stdout
        out = folder / "_grades"
        with open(out / "grades.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == ["assignment", "duedate", "timestamp", "student_id", "last_name",
                                 "first_name", "email", "raw_score", "late_submission_penalty",
                                 "score", "max_score"]
        got = {r["student_id"]: float(r["score"]) for r in rows}
        reports = {who: (out / f"{who}.txt").read_text() for who in expected}
        wrong = [who for who in expected if got.get(who) != expected[who]]
        assert not wrong, f"scores {got}, expected {expected}; the reports of {wrong}:\n" + "".join(
            reports[who] for who in wrong)
        assert "NotImplementedError" in reports["ada"] and "# HINT:" in reports["ada"]
        assert "AssertionError" in reports["cyd"]
        assert "ran past" in reports["dee"] and "the kernel died" in reports["eve"]
        assert "reached" not in reports["fay"]
        print(f"class of {len(expected)} graded in {wall:.0f} s")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    deadline = time.monotonic() + 20
    while (jobs() or job_processes() or submissions.learner_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert jobs() == [] and job_processes() == [] and submissions.learner_processes() == []
    assert not any(Path("/var/tmp/dplab-grade").glob("run-*"))
