"""Execute every lab, asserts only, under several settings, and print a table lab x setting.

    python tools/run_labs.py --any-p          # p = 1 and p = 3 on this machine (make test-any-p)
    python tools/run_labs.py --gpu            # NCCL, one engine per GPU; 4 engines sharing GPU 0 on gloo
    python tools/run_labs.py --gpu --timeout 480 --log gpu.log   # one after the other, bounded (make test-gpu)
    python tools/run_labs.py --setting NAME:VAR=VALUE,VAR=VALUE [labs/01_single_device.ipynb ...]
    python tools/run_labs.py --parallel --timeout 540 --setting ...   # settings at once, each bounded

Outputs are not compared and the notebooks are not written back: a lab passes when every cell
runs and every assert holds. After each lab, no process that it started may still be running.
Each verdict is printed (and appended to --log) as soon as its lab ends, so a run killed at its
limit still says what ran. The GPU settings never run at once: sharing GPU 0 and the cores made
NCCL's rank 0 a straggler.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
CELL_TIMEOUT_S = 600
ANY_P = {"p=1": {"DPLAB_ENGINES": "1"}, "p=3": {"DPLAB_ENGINES": "3"}}


def nvidia_gpus() -> list[dict[str, str]]:
    """The NVIDIA GPUs the driver reports (name, driver, compute mode), whatever torch sees; [] if none."""
    fields = ("name", "driver_version", "compute_mode")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.stdout.splitlines() if line.strip()]


def gpu_problem(torch_version: str, torch_cuda: str | None, n_visible: int, gpus: list[dict[str, str]]) -> str | None:
    """What stops the GPU run before anything starts, said with what to do; None if nothing does."""
    if torch_cuda is None and gpus:
        return (f"make test-gpu: this machine has {len(gpus)} NVIDIA GPU(s) ({gpus[0]['name']}), but torch "
                f"{torch_version} is a CPU build, so nothing was started. Install the CUDA build of the same "
                "version into the venv: .venv/bin/pip install --force-reinstall torch==" + torch_version.split("+")[0]
                + " --index-url https://download.pytorch.org/whl/cuXYZ, with the cuXYZ your driver "
                f"({gpus[0]['driver_version']}) supports (pytorch.org/get-started/locally lists them).")
    if n_visible == 0:
        return ("make test-gpu: no GPU is visible to torch on this machine (torch "
                f"{torch_version}), so nothing was started. Run it on a machine with an NVIDIA GPU "
                "and a CUDA build of torch, with CUDA_VISIBLE_DEVICES unset or naming the GPUs to use.")
    return None


SHARED_GPU_ENGINES = 4  # the gloo setting's engines, all on GPU 0
SHARED_GPU = f"gloo, {SHARED_GPU_ENGINES} share GPU 0"  # that setting's name


def thread_split(engines: int, cores: int) -> tuple[int, int]:
    """(torch threads per engine, threads of the notebook's kernel): the cores shared among the
    engines and the kernel, which also computes (references, single-process runs), so that no
    core runs two busy threads."""
    kernel = max(1, cores // (engines + 1))
    return max(1, (cores - kernel) // engines), kernel


def gpu_settings(say=print, rehearse: bool = False) -> dict[str, dict[str, str]]:
    """NCCL with one engine per GPU, and 4 engines sharing GPU 0 on gloo, to run one after the
    other; each engine (DPLAB_THREADS) and the kernel (OMP_NUM_THREADS, which torch reads as it
    starts) get their share of the cores. Exits if there is no GPU.
    rehearse: the same two settings on the CPU, gloo (1 engine, then 4), to try the run anywhere."""
    import torch

    cores = os.cpu_count() or 1
    if rehearse:
        say(f"rehearsal on the CPU: torch {torch.__version__}, {cores} cores, gloo for both settings")
        prefix, n_gpus, first, device, shared = "rehearsal of ", 1, "gloo", "cpu", {}
    else:
        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        gpus = nvidia_gpus()
        problem = gpu_problem(torch.__version__, torch.version.cuda, n_gpus, gpus)
        if problem:
            sys.exit(problem)
        say(f"torch {torch.__version__}, CUDA {torch.version.cuda}; {n_gpus} GPU(s) visible: "
            f"{torch.cuda.get_device_name(0)}; driver {gpus[0]['driver_version'] if gpus else 'unknown'}, "
            f"compute mode {gpus[0]['compute_mode'] if gpus else 'unknown'}")
        prefix, first, device, shared = "", "nccl", "cuda", {"CUDA_VISIBLE_DEVICES": "0"}
    # name: (engines, what the setting sets beyond them)
    plan = {f"{prefix}nccl, {n_gpus} GPU(s)": (n_gpus, {"DPLAB_BACKEND": first}),
            f"{prefix}{SHARED_GPU}": (SHARED_GPU_ENGINES, {"DPLAB_BACKEND": "gloo", **shared})}
    if not rehearse and gpus and gpus[0]["compute_mode"].lower().startswith("exclusive"):
        # One process per GPU: ranks cannot share GPU 0. `nvidia-smi -c DEFAULT` (as root) allows it.
        say(f"GPU 0 is in compute mode {gpus[0]['compute_mode']}: one process per GPU, so the setting "
            f"'{SHARED_GPU}' is left out; set the Default mode (nvidia-smi -i 0 -c DEFAULT, as root) to run it")
        del plan[SHARED_GPU]
    settings = {}
    for name, (engines, env) in plan.items():
        engine, kernel = thread_split(engines, cores)
        say(f"[{name}]: {engine} torch thread(s) per engine, {kernel} for the kernel, on {cores} cores")
        settings[name] = {"DPLAB_ENGINES": str(engines), "DPLAB_DEVICE": device, **env,
                          "DPLAB_THREADS": str(engine), "OMP_NUM_THREADS": str(kernel)}
    return settings


def parse_setting(text: str) -> tuple[str, dict[str, str]]:
    """'NAME:VAR=VALUE,VAR=VALUE' -> (NAME, {VAR: VALUE})."""
    name, _, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if a)
    if not name or not env:
        raise SystemExit(f"--setting {text!r}: write it as NAME:VAR=VALUE[,VAR=VALUE]")
    return name, env


def leftovers(before: set[int]) -> list[str]:
    """Processes started since `before` that are still alive after a grace period; they are killed."""
    procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(procs, timeout=15)
    names = []
    for p in alive:
        try:
            names.append(p.name())
            p.kill()
        except psutil.Error:
            pass
    return names


def run_lab(path: Path, env: dict[str, str], deadline: float | None = None) -> str:
    """Execute one lab with `env` added to the environment; return 'ok (N s)' or what failed.
    deadline (time.monotonic()): no cell runs past it."""
    nb = nbformat.read(path, as_version=4)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.perf_counter()
    try:
        client = NotebookClient(
            nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        if deadline is not None:
            client.timeout_func = lambda cell: max(1, min(CELL_TIMEOUT_S, int(deadline - time.monotonic())))
        client.execute()
        result = f"ok ({time.perf_counter() - t0:.0f} s)"
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        result = describe_failure(nb, e)
        if isinstance(e, CellTimeoutError) and deadline is not None and time.monotonic() >= deadline - 1:
            result = f"FAIL: not finished within the limit ({time.perf_counter() - t0:.0f} s)"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    left = leftovers(before)
    if left:
        result += f"; left running: {', '.join(sorted(set(left)))}"
    return result


def describe_failure(nb, error: Exception) -> str:
    """'cell K: ErrorName: message' for the first code cell whose output holds an error."""
    code_index = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code_index += 1
        if "raises-exception" in cell.metadata.get("tags", []):
            continue  # an error there is what the cell shows
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"FAIL cell {code_index}: {out['ename']}: {out['evalue'][:160]}"
    return f"FAIL: {type(error).__name__}: {str(error).strip().splitlines()[-1][:160]}"


# What the labs read beside labs/ (Lab 5 runs ../chapters/ddp_train.py), linked into each copy.
BESIDE_LABS = ["chapters", "img"]


def own_copies(labs: list[Path], folder: Path) -> list[Path]:
    """The labs copied into folder/labs, with BESIDE_LABS linked beside it: a setting run there
    writes its own labs/artifacts/ (Lab 4's checkpoint, Lab 1's reference for Lab 2)."""
    (folder / "labs").mkdir(parents=True)
    for name in BESIDE_LABS:
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    copies = []
    for lab in labs:
        copies.append(folder / "labs" / lab.name)
        shutil.copyfile(lab, copies[-1])
    return copies


def kill_tree(pid: int) -> None:
    """Kill a process and everything it started, and reap them."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(tree, timeout=10)


def run_in_parallel(labs: list[Path], settings: dict[str, dict[str, str]], timeout: float | None):
    """Each setting in a process of its own (this script, one setting), all at once, on its own
    copy of the labs; a setting still running after `timeout` s is killed, whole, and its
    unfinished labs say so."""
    with tempfile.TemporaryDirectory(prefix="run_labs-") as tmp:
        return wait_for_settings(labs, settings, timeout, Path(tmp))


def wait_for_settings(labs, settings, timeout, tmp: Path):
    procs = {}
    for i, (name, env) in enumerate(settings.items()):
        own = own_copies(labs, tmp / f"setting{i}")
        cmd = [sys.executable, __file__, "--settings-json", json.dumps({name: env}), *map(str, own)]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
    t0 = time.monotonic()
    results = {}
    for name, proc in procs.items():
        left = None if timeout is None else max(1.0, timeout - (time.monotonic() - t0))
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc.pid)  # the whole tree: nbclient's kernels have sessions of their own
            out, _ = proc.communicate()
        for line in out.splitlines():
            m = re.match(r"^(\S+\.ipynb) \[(.+)\]: (.*)$", line)
            if m and m.group(2) == name:
                results[m.group(1), name] = m.group(3)
                print(line, flush=True)
        for lab in labs:
            if (lab.name, name) not in results:
                results[lab.name, name] = (f"FAIL: not finished within the {timeout:g} s limit" if timed_out
                                           else "FAIL: its run stopped early")
                print(f"{lab.name} [{name}]: {results[lab.name, name]}", flush=True)
    return results


def run_one_after_another(labs: list[Path], settings: dict[str, dict[str, str]], timeout: float | None,
                          say=print) -> dict:
    """Lab by lab, each setting in turn, on its own copy of the labs when there are several;
    past `timeout` s no cell runs and the labs left say so."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="run_labs-") as tmp:
        copies = {name: (own_copies(labs, Path(tmp) / f"setting{i}") if len(settings) > 1 else labs)
                  for i, name in enumerate(settings)}
        results = {}
        for i, lab in enumerate(labs):
            for name, env in settings.items():
                if deadline is not None and time.monotonic() >= deadline - 1:
                    results[lab.name, name] = f"FAIL: not started within the {timeout:g} s limit"
                else:
                    results[lab.name, name] = run_lab(copies[name][i], env, deadline)
                say(f"{lab.name} [{name}]: {results[lab.name, name]}")
        return results


def logger(path: Path | None):
    """print, and append to `path` at once (a run killed later keeps what it said)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        print(line, flush=True)
        if path is not None:
            with open(path, "a") as f:
                f.write(line + "\n")
    return say


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*", type=Path, help="notebooks (default: labs/*.ipynb)")
    ap.add_argument("--any-p", action="store_true", help="run at p = 1 and p = 3")
    ap.add_argument("--gpu", action="store_true", help="run the two GPU settings")
    ap.add_argument("--rehearse", action="store_true", help="with --gpu: the same settings on the CPU, gloo")
    ap.add_argument("--setting", action="append", default=[], help="NAME:VAR=VALUE,... (repeatable)")
    ap.add_argument("--parallel", action="store_true", help="run the settings at once, one process each")
    ap.add_argument("--timeout", type=float, help="seconds: with --parallel, before a setting is killed; "
                    "else past it no cell runs")
    ap.add_argument("--log", type=Path, help="append each verdict to this file as it comes")
    ap.add_argument("--settings-json", help=argparse.SUPPRESS)  # one setting, from --parallel
    args = ap.parse_args()
    if args.timeout is not None and args.timeout <= 0:
        ap.error("--timeout takes seconds > 0")
    if args.gpu and args.parallel:
        ap.error("--gpu runs its settings one after the other: at once, GPU 0 carried NCCL's rank 0 "
                 "and every gloo engine, and rank 0 became a straggler")
    say = logger(args.log)

    settings: dict[str, dict[str, str]] = {}
    if args.gpu:
        settings.update(gpu_settings(say, rehearse=args.rehearse))
    if args.any_p:
        settings.update(ANY_P)
    settings.update(parse_setting(s) for s in args.setting)
    if args.settings_json:
        settings.update(json.loads(args.settings_json))
    if not settings:
        ap.error("name at least one of --any-p, --gpu, --setting")
    labs = args.labs or sorted((ROOT / "labs").glob("*.ipynb"))
    missing = [str(p) for p in labs if not p.is_file()]
    if missing:
        ap.error(f"no such notebook: {', '.join(missing)}")

    results = {}
    if args.parallel and len(settings) > 1:
        results = run_in_parallel([lab.resolve() for lab in labs], settings, args.timeout)
    else:
        results = run_one_after_another([lab.resolve() for lab in labs], settings, args.timeout, say)

    width = max(len(lab.name) for lab in labs)
    cols = {name: max(len(name), *(len(results[lab.name, name]) for lab in labs)) for name in settings}
    say("\n" + "lab".ljust(width) + " | " + " | ".join(n.ljust(w) for n, w in cols.items()))
    say("-" * width + "-+-" + "-+-".join("-" * w for w in cols.values()))
    for lab in labs:
        say(lab.name.ljust(width) + " | " + " | ".join(results[lab.name, n].ljust(w) for n, w in cols.items()))
    failed = [k for k, v in results.items() if not v.startswith("ok") or "left running" in v]
    say(f"\n{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
