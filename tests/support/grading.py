"""Learners' notebooks for the grading tests (tests/student, tests/nbgrader, tests/slurm): the
handed-out copy of a lab, its solutions pasted back, a plausible mistake made, a cell put in,
and a probe of what the learner's code can reach, made in memory by teach.student's own
functions; make student's folder; a lab in miniature for the grader's own tests; the grader run
as a command, and the processes it started; the labs a slow test grades."""
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import psutil

from booktools.labs import Lab, Mistake, by_tree, chosen, labs
from booktools.labs import lab as lab_named
from teach import sandbox, solutions, student
from tests.support.processes import lab_processes


def lab(name: str):
    """The lab's notebook, by its file name (02_data_parallel_by_hand.ipynb) or stem."""
    return nbformat.read(lab_named(name).path, as_version=4)


def handed_out(name: str):
    """make student's copy of the lab: every region a stub."""
    return student.student_version(lab(name))


def solved(name: str):
    """The handed-out copy with the lab's solutions pasted back."""
    return student.paste_back(handed_out(name), lab(name))


def index_of(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if solutions.grading(c).get("grade_id") == grade_id)


def with_cell(nb, before: str, source: str):
    """The notebook with a new code cell of `source` just before the cell named `before`."""
    nb.cells.insert(index_of(nb, before), nbformat.v4.new_code_cell(source))
    return nb


def with_change(nb, grade_id: str, old: str, new: str):
    """The notebook with `old` replaced by `new` in the cell named grade_id, where it stands once."""
    cell = nb.cells[index_of(nb, grade_id)]
    assert cell.source.count(old) == 1, (grade_id, old)
    cell.source = cell.source.replace(old, new)
    return nb


def with_mistake(nb, mistake: Mistake):
    """The notebook with the plausible mistake made in its solution cell."""
    return with_change(nb, mistake.cell, mistake.old, mistake.new)


def mistakes() -> dict[str, tuple[Lab, Mistake]]:
    """Every lab's plausible mistakes (booktools.labs), by name: (the lab, the mistake)."""
    return {m.name: (each, m) for each in labs() for m in each.mistakes}


def points_before(name: str, grade_id: str) -> float:
    """The points of the lab's checks that come before the cell named grade_id."""
    nb = lab(name)
    stop = index_of(nb, grade_id)
    return sum(solutions.grading(c)["points"] for c in nb.cells[:stop] if solutions.is_check(c))


def points(name: str, checks=None) -> float:
    """The points of the lab's checks (of those named, if given)."""
    return sum(solutions.grading(c)["points"] for c in lab(name).cells if solutions.is_check(c)
               and (checks is None or solutions.grading(c)["grade_id"] in checks))


def make_student(out: Path, chosen_labs: tuple[Lab, ...] | list[Lab] = ()) -> Path:
    """make student's folder in `out` (of the chosen labs, else every lab), with the book's
    other files beside labs/; its labs/ folder."""
    done = subprocess.run([sys.executable, "-m", "teach.student", "--out", str(out),
                           *(str(each.path) for each in chosen_labs)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("stubs to write") == len(chosen_labs or labs()), done.stdout
    return out / "labs"


def pasted_back(handout: Path, name: str, folder: str) -> Path:
    """The lab's student notebook with its solutions back (`python -m teach.student
    --paste-back`), in a folder `folder` beside the handout's labs/, where the handout's other
    files are at the same place."""
    where = handout.parent / folder
    where.mkdir(exist_ok=True)
    out = where / name
    done = subprocess.run([sys.executable, "-m", "teach.student", "--paste-back", str(handout / name),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def probe(reach: dict[str, tuple[str, str]]) -> str:
    """A cell that tries each {what: (mode, path)} of `reach` (mode "r" reads a file or lists a
    folder, "w" writes a file) and fails, naming them, if any attempt succeeded (a folder seen
    empty hides what it holds)."""
    tries = ",\n".join(f"    ({what!r}, {mode!r}, {path!r})" for what, (mode, path) in reach.items())
    return f"""import os

reached = []
for what, mode, path in [
{tries},
]:
    try:
        if mode == "w":
            with open(path, "w") as f:
                f.write("written by a learner's notebook")
        elif os.path.isdir(path):
            if not os.listdir(path):
                continue  # an empty folder in its place: what it holds is hidden
        else:
            open(path).read()
        reached.append(what)
    except OSError:
        pass
assert not reached, "the learner's code reached " + ", ".join(reached)
print("nothing reached")"""


def learner_processes() -> list[int]:
    """Every live process of the sandbox's accounts (teach.sandbox's pool)."""
    return [p.pid for p in psutil.process_iter(["username"])
            if (p.info["username"] or "").startswith(sandbox.ACCOUNT)]


def picked(variable: str, salt: str) -> list[Lab]:
    """The labs a slow grading test runs: the environment's `variable` (all, or numbers such as
    02,06), else one lab fixed by the repository's tree (booktools.labs.by_tree, with `salt`,
    so that two tests that rotate pick independently). The test says which it picked."""
    spec = os.environ.get(variable, "").strip()
    found = chosen(spec) if spec else [by_tree(labs(), salt)]
    print(f"{variable}: grading {', '.join(each.stem for each in found)} "
          f"({variable}=all or ={found[0].stem[:2]},... chooses)", file=sys.__stderr__)
    return found


ENGINES = "2"  # several ranks, so that collectives can hang; the fastest such p on 2 cores
MARK = "GRADING_TEST_RUN"  # in the grader's environment, so in that of every process it starts

TINY_LAB = "00_tiny_lab.ipynb"
TINY_BROADCAST = "comm.Bcast(buf, root=0)"  # the solution run on the ranks
TINY_TOTAL = "total = sum(range(1, 11))"  # the solution run in the kernel


def _code(source: str, grade_id: str = "", points: float = 0):
    """A code cell; with grade_id, a solution cell (no points) or a graded check (points)."""
    cell = nbformat.v4.new_code_cell(source)
    if grade_id:
        cell.metadata["nbgrader"] = {"grade": bool(points), "grade_id": grade_id, "locked": bool(points),
                                     "schema_version": solutions.SCHEMA_VERSION, "solution": not points,
                                     "task": False, **({"points": points} if points else {})}
    return cell


def tiny_lab(source: Path) -> Path:
    """A lab in miniature, written into `source` (the folder the grader's hidden --source option
    names) as TINY_LAB: a cluster of 2 engines, a broadcast to solve on the ranks and a sum to
    solve in the kernel, a check of each. It grades in seconds, where a real lab takes a minute:
    the grader's behaviour when ranks fail or hang, or the kernel dies, needs no more. Its path."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A lab in miniature"),
        _code("import dplab\n\ncluster = dplab.start_cluster(2)\nrank0 = cluster.client[0]"),
        _code("%%px\nimport numpy as np\nfrom mpi4py import MPI\n\ncomm = MPI.COMM_WORLD"),
        _code("%%px\nbuf = np.full(4, float(rank))\n# HINT: overwrite every rank's buf with rank 0's\n"
              f"### BEGIN SOLUTION\n{TINY_BROADCAST}\n### END SOLUTION\n"
              "after_bcast = comm.allgather(buf.tolist())", "tiny-broadcast"),
        _code(f"# HINT: the sum of 1 to 10\n### BEGIN SOLUTION\n{TINY_TOTAL}\n### END SOLUTION",
              "tiny-total"),
        _code("assert rank0['after_bcast'] == [[0.0] * 4] * 2, rank0['after_bcast']",
              "tiny-check-broadcast", points=1),
        _code("assert total == 55, total", "tiny-check-total", points=2),
    ])
    assert not solutions.check_notebook(nb, TINY_LAB), solutions.check_notebook(nb, TINY_LAB)
    source.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, source / TINY_LAB)
    return source / TINY_LAB


def marked(mark: str) -> dict[int, str]:
    """The live lab processes (tests.support.processes.lab_processes) that carry `mark` in MARK:
    those a grader given that mark started, at any depth, also those that left its process tree
    (the kit's guardian, ipyparallel's controller); never another test's."""
    found = {}
    for pid, cmd in lab_processes().items():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).environ().get(MARK) == mark:
                found[pid] = cmd
    return found


def left_marked(mark: str, within: float) -> dict[int, str]:
    """The processes carrying `mark` still alive after waiting up to `within` s for them to go;
    each is killed, so that a failure leaves nothing either."""
    deadline = time.monotonic() + within
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = marked(mark)
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return left


def grader(notebook: Path, *args: str, engines: str = ENGINES, mark: str = "") -> dict:
    """subprocess keywords that run `python -m teach.grade` on the notebook with `engines`
    engines, no other DPLAB_* setting of this shell, and `mark` (if given) in MARK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_") and k != MARK}
    return dict(args=[sys.executable, "-m", "teach.grade", str(notebook), *args],
                env={**env, "DPLAB_ENGINES": engines, **({MARK: mark} if mark else {})})


def grade(notebook: Path, *args: str, timeout: float = 600, engines: str = ENGINES,
          source: Path | None = None) -> tuple[int, dict, str]:
    """Run the grader (on the labs of `source`, if given, else the book's); its exit status,
    JSON report and printout. Asserts that it left nothing: no process it started, at any depth."""
    mark = uuid.uuid4().hex
    report = notebook.with_suffix(".json")
    where = ("--source", str(source)) if source else ()
    out = subprocess.run(**grader(notebook, "--json", str(report), *where, *args, engines=engines, mark=mark),
                         capture_output=True, text=True, timeout=timeout)
    left = marked(mark)
    assert not left, f"the grader left {left}\n{out.stdout}"
    data = json.loads(report.read_text()) if report.exists() else {}
    assert not data.get("left_running"), out.stdout
    return out.returncode, data, out.stdout + out.stderr
