"""The GPU pass's settings (the condition `gpu`): NCCL with one engine per GPU, then 4 engines
sharing GPU 0 on gloo, one after the other (at once, GPU 0 carried NCCL's rank 0 and every gloo
engine, and rank 0 became a straggler); the cores split between the engines and the notebook's
kernel; and what stops the pass before anything starts, said with what to do.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Callable

SHARED_GPU_ENGINES = 4  # the gloo setting's engines, all on GPU 0
SHARED_GPU = f"gloo, {SHARED_GPU_ENGINES} share GPU 0"  # that setting's name


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
    """What stops the GPU pass before anything starts, said with what to do; None if nothing does."""
    if torch_cuda is None and gpus:
        return (f"gpu: this machine has {len(gpus)} NVIDIA GPU(s) ({gpus[0]['name']}), but torch "
                f"{torch_version} is a CPU build, so nothing was started. Install the CUDA build of the same "
                "version into the venv: .venv/bin/pip install --force-reinstall torch==" + torch_version.split("+")[0]
                + " --index-url https://download.pytorch.org/whl/cuXYZ, with the cuXYZ your driver "
                f"({gpus[0]['driver_version']}) supports (pytorch.org/get-started/locally lists them).")
    if n_visible == 0:
        return ("gpu: no GPU is visible to torch on this machine (torch "
                f"{torch_version}), so nothing was started. Run it on a machine with an NVIDIA GPU "
                "and a CUDA build of torch, with CUDA_VISIBLE_DEVICES unset or naming the GPUs to use "
                "(or rehearse it on this CPU: python -m booktools.run --on gpu --rehearse).")
    return None


def problem_here() -> str | None:
    """gpu_problem on this machine, with its torch."""
    import torch

    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return gpu_problem(torch.__version__, torch.version.cuda, n_gpus, nvidia_gpus())


def thread_split(engines: int, cores: int) -> tuple[int, int]:
    """(torch threads per engine, threads of the notebook's kernel): the cores shared among the
    engines and the kernel, which also computes (references, single-process runs), so that no
    core runs two busy threads."""
    kernel = max(1, cores // (engines + 1))
    return max(1, (cores - kernel) // engines), kernel


def gpu_settings(say: Callable[[str], None] = print, rehearse: bool = False) -> list[tuple[str, dict[str, str]]]:
    """The two settings (name, environment), to run one after the other; each engine
    (DPLAB_THREADS) and the kernel (OMP_NUM_THREADS, which torch reads as it starts) get their
    share of the cores. rehearse: the same two on the CPU, gloo (1 engine, then 4)."""
    import torch

    cores = os.cpu_count() or 1
    if rehearse:
        say(f"rehearsal on the CPU: torch {torch.__version__}, {cores} cores, gloo for both settings")
        prefix, n_gpus, first, device, shared, gpus = "rehearsal of ", 1, "gloo", "cpu", {}, []
    else:
        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        gpus = nvidia_gpus()
        say(f"torch {torch.__version__}, CUDA {torch.version.cuda}; {n_gpus} GPU(s) visible: "
            f"{torch.cuda.get_device_name(0)}; driver {gpus[0]['driver_version'] if gpus else 'unknown'}, "
            f"compute mode {gpus[0]['compute_mode'] if gpus else 'unknown'}")
        prefix, first, device, shared = "", "nccl", "cuda", {"CUDA_VISIBLE_DEVICES": "0"}
    # name: (engines, what the setting sets beyond them)
    plan = {f"{prefix}nccl, {n_gpus} GPU(s)": (n_gpus, {"DPLAB_BACKEND": first}),
            f"{prefix}{SHARED_GPU}": (SHARED_GPU_ENGINES, {"DPLAB_BACKEND": "gloo", **shared})}
    if gpus and gpus[0]["compute_mode"].lower().startswith("exclusive"):
        # One process per GPU: ranks cannot share GPU 0. `nvidia-smi -c DEFAULT` (as root) allows it.
        say(f"GPU 0 is in compute mode {gpus[0]['compute_mode']}: one process per GPU, so the setting "
            f"'{SHARED_GPU}' is left out; set the Default mode (nvidia-smi -i 0 -c DEFAULT, as root) to run it")
        del plan[SHARED_GPU]
    settings = []
    for name, (engines, env) in plan.items():
        engine, kernel = thread_split(engines, cores)
        say(f"[{name}]: {engine} torch thread(s) per engine, {kernel} for the kernel, on {cores} cores")
        settings.append((name, {"DPLAB_ENGINES": str(engines), "DPLAB_DEVICE": device, **env,
                                "DPLAB_THREADS": str(engine), "OMP_NUM_THREADS": str(kernel)}))
    return settings


LAB_PARTS = re.compile(r"ipyparallel|mpiexec|hydra_pmi|ipykernel|torchrun")


def lab_processes() -> list[str]:
    """'pid age command' of every process of a lab still running on this machine (a kernel,
    an engine cluster, a torchrun job): a GPU pass should leave none."""
    import time

    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if LAB_PARTS.search(cmd) and p.info["pid"] != os.getpid():
            found.append(f"{p.info['pid']} {time.time() - p.info['create_time']:.0f} s {cmd[:100]}")
    return found
