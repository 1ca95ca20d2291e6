"""Run a notebook's cells in a fresh kernel, bounded in time: the one way the book's tools run a
notebook (the lab runner, `make labs`, the graders).

The timeout rule: one cell may run CELL_TIMEOUT_S, the whole notebook NOTEBOOK_TIMEOUT_S. A
cell that runs past either stops the run: the kernel is killed, the kit's guardian ends its
cluster, and whatever the kernel started that is still alive REAP_S later is killed and named.
nbval (`make test-labs`) and nbgrader's autograde run cells themselves: they are given
CELL_TIMEOUT_S.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil

CELL_TIMEOUT_S = 300  # the slowest cell of any lab takes well under a minute on a 2-core box
NOTEBOOK_TIMEOUT_S = 900  # the slowest lab takes about two minutes beside a second learner
REAP_S = 20  # the guardian ends a dead kernel's cluster within a few seconds
STRAY_S = 3  # what a process orphaned as it ended takes to be gone
EXPECTED = "raises-exception"  # a cell tagged so shows an error on purpose


@dataclass
class Run:
    """What running a notebook did: which code cells ran, and why it stopped early, if it did."""

    ran: list[int] = field(default_factory=list)  # indices of the cells that ran, in order
    stopped: str = ""  # why the run ended before its last cell ('' if it did not)
    seconds: float = 0.0
    left_running: list[str] = field(default_factory=list)  # names of processes killed after it
    # processes alive after the last cell that the kernel did not start and wait for: orphans of
    # a fork away, reparented to a sandbox's first process (`forked_away`); killed with it
    forked_away: list[str] = field(default_factory=list)

    def errors(self, nb) -> list[tuple[int, str, str]]:
        """(cell index, error name, message) of every cell that ran and raised, in order; not
        the cells tagged raises-exception."""
        return [(index, *error) for index in self.ran if (error := error_of(nb.cells[index]))]


def error_of(cell) -> tuple[str, str] | None:
    """(error name, message) of the error a code cell shows, unless it is tagged raises-exception."""
    if EXPECTED in cell.metadata.get("tags", []):
        return None
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return out["ename"], out["evalue"]
    return None


def code_number(nb, index: int) -> int:
    """The cell's number among the notebook's code cells, counted from 1 (as a reader counts)."""
    return sum(c.cell_type == "code" for c in nb.cells[:index + 1])


def execute(nb, folder: Path, *, env: dict[str, str] | None = None, km=None,
            timeout: float = NOTEBOOK_TIMEOUT_S, cell_timeout: float = CELL_TIMEOUT_S,
            stop_on_error: bool = True, last: int | None = None, label=None) -> Run:
    """Run the code cells of `nb` (in place: their outputs are replaced) in a new kernel whose
    working folder is `folder`, with `env` added to this process's environment (or started by
    `km`, a kernel manager of the caller's, such as a sandbox's).

    stop_on_error: stop at the first cell that raises (one tagged raises-exception may);
    otherwise run on, as a grader does. last: the index of the last cell to run.
    label(nb, index): how a stop's message names a cell (default: 'code cell N')."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    name = label or (lambda nb, i: f"code cell {code_number(nb, i)}")
    run = Run()
    client = NotebookClient(nb, km=km, timeout=int(cell_timeout), kernel_name="python3", allow_errors=True,
                            record_timing=False, resources={"metadata": {"path": str(folder)}})
    client.owns_km = True  # shut the kernel down at the end, whoever made its manager
    seen: dict[int, psutil.Process] = {}
    t0 = time.monotonic()
    start = {} if km is not None else {"env": {**os.environ, **(env or {})}}
    # the kernel's stderr, quoted if it dies
    with tempfile.TemporaryFile("w+") as kernel_log, client.setup_kernel(stderr=kernel_log, **start):
        kernel_pid = client.km.provisioner.process.pid
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            left = timeout - (time.monotonic() - t0)
            if left < 1:
                run.stopped = f"the notebook's time limit ({timeout:g} s) ran out before {name(nb, index)}"
                break
            client.timeout = int(min(cell_timeout, left)) or 1
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                run.stopped = (f"{name(nb, index)} ran past {client.timeout} s, so the kernel was "
                               "killed (do ranks wait for each other for ever?)")
                cell.outputs.append(nbformat.v4.new_output("error", ename="TimeoutError",
                                                           evalue=run.stopped, traceback=[]))
            except DeadKernelError:
                kernel_log.seek(0)
                said = [line for line in kernel_log.read().splitlines() if "without encryption" not in line]
                said = "\n".join(line for line in said[-5:] if line.strip())[:400]
                run.stopped = f"the kernel died in {name(nb, index)}" + (f"; it said:\n{said}" if said else "")
                cell.outputs.append(nbformat.v4.new_output("error", ename="DeadKernelError",
                                                           evalue=run.stopped, traceback=[]))
            finally:
                run.ran.append(index)
                seen.update((p.pid, p) for p in _tree(kernel_pid))
            if run.stopped:
                client.shutdown_kernel = "immediate"
                break
            if stop_on_error and (error := error_of(cell)):
                first = (error[1].strip().splitlines() or [""])[0][:300]
                run.stopped = f"{name(nb, index)} raised {error[0]}" + (f": {first}" if first else "")
                break
            if index == last:
                break
        run.forked_away = forked_away(kernel_pid)
        seen.update((p.pid, p) for p in _tree(kernel_pid))
    run.seconds = time.monotonic() - t0
    _, alive = psutil.wait_procs(list(seen.values()), timeout=REAP_S)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            run.left_running.append(p.name())
            p.kill()
    return run


def forked_away(started: int) -> list[str]:
    """The names of the processes under `started` (the process the kernel manager started) that
    are not the kernel's own descendants. Without a sandbox the kernel is that process and there
    are none; in teach.sandbox's, `started` is unshare, whose child, the first process of the
    run's PID namespace, is the kernel's parent and inherits every orphan of a fork away."""
    from dplab.cluster.processes import alive

    tree = _tree(started)
    with contextlib.suppress(psutil.Error):
        kernel = next((p for p in tree if "ipykernel_launcher" in " ".join(p.cmdline())), None)
        if kernel is None:
            return []
        own = {p.pid for p in _tree(kernel.pid)}
        above = {p.pid for p in kernel.parents()}
        strays = [p for p in tree if p.pid not in own and p.pid not in above]
        # a process of the kernel's that was ending as the cells ended (a killed rank's peers)
        # may just have been orphaned: only what is still alive a moment later forked away
        _, waiting = psutil.wait_procs(strays, timeout=STRAY_S)
        names = []
        for p in alive(waiting):  # a zombie has ended
            with contextlib.suppress(psutil.Error):
                names.append(p.name())
        return sorted(names)
    return []


def _tree(pid: int) -> list[psutil.Process]:
    """The process and everything it started."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def execute_file(path: Path, **kwargs) -> tuple[object, Run]:
    """Read the notebook at `path` and run it in its own folder (execute's keywords); the
    notebook, with its new outputs, and the run. The file is not written."""
    nb = nbformat.read(path, as_version=4)
    return nb, execute(nb, Path(path).resolve().parent, **kwargs)


def verdict(nb, run: Run) -> str:
    """'ok (N s)', or what stopped the run, in one line, and what was left running."""
    errors = run.errors(nb)
    if errors:
        index, ename, evalue = errors[0]
        said = f"FAIL code cell {code_number(nb, index)}: {ename}: {evalue.strip()[:160]}"
    elif run.stopped:
        said = f"FAIL: {run.stopped.splitlines()[0]}"
    else:
        said = f"ok ({run.seconds:.0f} s)"
    if run.left_running:
        said += f"; left running: {', '.join(sorted(set(run.left_running)))}"
    return said
