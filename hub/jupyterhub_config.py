"""Sample JupyterHub configuration for running the labs on one GPU node.

Copy it next to your hub (or run `jupyterhub -f hub/jupyterhub_config.py`), pick the authenticator
and spawner your site uses, and choose one of two set-ups with DPHUB_MODE in the hub's
environment (read_settings reads DPHUB_*; edit it to change the defaults):

  own     one learner per GPU. Each learner's server sees only its own GPU
          (CUDA_VISIBLE_DEVICES, by UUID), the lowest free one, so the node takes as many
          learners as it has GPUs; a GPU in MIG mode counts each MIG instance as one. NCCL needs one GPU per rank, so a learner gets 1 engine on NCCL; ask
          for more engines (DPHUB_ENGINES) and they share the learner's GPU on Gloo.
  shared  learners share all of the node's GPUs. Each learner gets DPHUB_ENGINES
          engines (default 4) on Gloo, spread over the GPUs (engine i on GPU i mod GPUs).
          DPHUB_LEARNERS, the learners at once, shares the cores among all their engines.

On a node without GPUs (nvidia-smi finds none) both give CPU engines on Gloo. The backend and
device come from the kit's one policy (dplab.cluster.settings.choose_backend: NCCL only when
every rank owns a GPU), and the threads from its rule (threads_per_rank), so the hub and
`dplab.start_cluster` cannot disagree. The spawner's `environment` carries the result
(DPLAB_ENGINES, DPLAB_BACKEND, DPLAB_DEVICE, DPLAB_THREADS, CUDA_VISIBLE_DEVICES) to every
learner's server, its kernels and their engines. `make test-hub` loads this file, with its own
authenticator, spawner and addresses, and runs Lab 0 through it.

DPHUB_* are the hub's own settings, not the kit's: they configure this file's spawner
hooks, are read here only (read_settings), and never reach a learner. The kit's DPLAB_*
settings are read in dplab/cluster/settings.py only; this file writes them into the
spawner's environment.

The functions are plain Python, so tests import this file and call them with a fake GPU count.
It needs dplab installed in the hub's environment (`pip install -e .`, README).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from dplab.cluster.settings import DEFAULT_ENGINES, choose_backend, threads_per_rank, to_environment

MODES = ("own", "shared")


class HubPolicyError(ValueError):
    """A set-up this node cannot give a learner."""


def parse_gpu_list(text: str) -> list[str]:
    """The node's GPU slots from `nvidia-smi -L`, as CUDA_VISIBLE_DEVICES can name them: the UUID
    of each MIG instance of a GPU in MIG mode, else the GPU's own UUID (the index if none is shown).

    A UUID names the same device whatever order CUDA enumerates them in; MIG instances are no
    "GPU n" lines of their own, and the default CUDA order (fastest first) is not nvidia-smi's.
    """
    slots: list[list[str]] = []  # per GPU: [its own name, then its MIG instances]
    for line in text.splitlines():
        uuid = re.search(r"\(UUID: ([^)]+)\)", line)
        if line.startswith("GPU "):
            slots.append([uuid.group(1) if uuid else line.split(":")[0].split()[1]])
        elif line.strip().startswith("MIG ") and slots and uuid:
            slots[-1].append(uuid.group(1))
    return [name for gpu in slots for name in (gpu[1:] or gpu[:1])]


def gpu_devices() -> list[str]:
    """The NVIDIA GPU slots on this node (parse_gpu_list of nvidia-smi -L), [] without a driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return parse_gpu_list(out)


def count_gpus() -> int:
    """The number of GPU slots on this node (a GPU, or each MIG instance of one), 0 without a driver."""
    return len(gpu_devices())


def read_settings(env: dict[str, str]) -> tuple[str, int | None, int | None]:
    """Mode, engines per learner and learners at once (None: unset) from DPHUB_*."""
    mode = env.get("DPHUB_MODE") or "own"
    if mode not in MODES:
        raise HubPolicyError(f"DPHUB_MODE={mode!r}: use 'own' (one learner per GPU) or 'shared' (learners share the GPUs)")
    numbers = {}
    for key in ("DPHUB_ENGINES", "DPHUB_LEARNERS"):
        raw = env.get(key) or None
        if raw is not None and (not raw.isdigit() or int(raw) < 1):
            raise HubPolicyError(f"{key}={raw!r} is not a whole number >= 1: fix it or unset it")
        numbers[key] = None if raw is None else int(raw)
    return mode, numbers["DPHUB_ENGINES"], numbers["DPHUB_LEARNERS"]


def learner_environment(
    mode: str, gpus: int, gpu: int | None = None, engines: int | None = None, cores: int = 1,
    learners: int | None = None, devices: list[str] | None = None,
) -> dict[str, str]:
    """The DPLAB_* variables (and CUDA_VISIBLE_DEVICES) for one learner's server.

    gpus: GPUs on the node; gpu: the learner's own GPU in mode 'own'; engines: per learner (None:
    the mode's default); learners: how many share the node at once (in mode 'own', one per GPU),
    so that all their engines' torch threads together fill the `cores` without oversubscribing
    them; None leaves the threads to dplab, which shares the cores among one learner's engines.
    devices: the slots' names (gpu_devices()); without them a GPU is named by its index, in
    nvidia-smi's order (CUDA_DEVICE_ORDER=PCI_BUS_ID, which every learner with GPUs gets).
    """
    if mode not in MODES:
        raise HubPolicyError(f"unknown mode {mode!r}: use 'own' or 'shared'")
    extra = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if gpus else {}
    if devices is not None and len(devices) != gpus:
        raise HubPolicyError(f"{len(devices)} device names for {gpus} GPUs")
    if mode == "own" and gpus:
        if gpu is None or not 0 <= gpu < gpus:
            raise HubPolicyError(f"mode 'own' needs the learner's GPU, 0..{gpus - 1}, got {gpu!r}")
        # The learner's server sees its own GPU only; the node takes one learner per GPU.
        p, visible, learners = engines or 1, 1, gpus
        extra["CUDA_VISIBLE_DEVICES"] = devices[gpu] if devices else str(gpu)
    else:
        p, visible = engines or DEFAULT_ENGINES, gpus
    # NCCL needs a GPU per rank: more engines than the learner's one GPU, or GPUs shared with other
    # learners, run on Gloo.
    choice = choose_backend(p, visible, shared_gpus=mode == "shared")
    threads = threads_per_rank(learners * p, cores) if learners is not None else None
    return {**extra, **to_environment(p=p, backend=choice.backend, device=choice.device, threads=threads)}


class GpuSlots:
    """Gives each learner's server the lowest free GPU, and takes it back when the server stops.

    It lives in the hub's memory: keep JupyterHub's cleanup_servers on (the default), so that a
    hub restart stops the servers too and no GPU is handed out twice.
    """

    def __init__(self, gpus: int):
        self.gpus = gpus
        self.holders: dict[str, int] = {}

    def take(self, server: str) -> int:
        """The GPU of `server` (user/name): the one it holds, else the lowest free one."""
        if server in self.holders:
            return self.holders[server]
        free = sorted(set(range(self.gpus)) - set(self.holders.values()))
        if not free:
            raise HubPolicyError(
                f"every GPU of this node ({self.gpus}) has a learner already: stop a server, "
                "or set DPHUB_MODE=shared so that learners share the GPUs"
            )
        self.holders[server] = free[0]
        return free[0]

    def release(self, server: str) -> None:
        """Free the GPU that `server` held, if any."""
        self.holders.pop(server, None)


def server_key(spawner) -> str:
    """One learner's server: user name, and the server's name for named servers."""
    return f"{spawner.user.name}/{spawner.name}"


def make_hooks(mode: str, gpus: int, engines: int | None, learners: int | None, cores: int,
               devices: list[str] | None = None):
    """The spawner's pre_spawn_hook (sets its environment) and post_stop_hook (frees its GPU)."""
    slots = GpuSlots(gpus)

    def pre_spawn_hook(spawner) -> None:
        gpu = slots.take(server_key(spawner)) if mode == "own" and gpus else None
        policy = learner_environment(mode, gpus, gpu, engines, cores, learners, devices)
        spawner.environment = {**spawner.environment, **policy}
        spawner.log.info("dplab: %s gets %s", server_key(spawner), policy)

    def post_stop_hook(spawner) -> None:
        slots.release(server_key(spawner))

    return pre_spawn_hook, post_stop_hook


if "get_config" in globals():  # loaded by JupyterHub (traitlets), not imported by a test
    c = get_config()  # noqa: F821
    _mode, _engines, _learners = read_settings(dict(os.environ))
    _devices = gpu_devices()
    c.Spawner.pre_spawn_hook, c.Spawner.post_stop_hook = make_hooks(
        _mode, len(_devices), _engines, _learners, os.cpu_count() or 1, _devices
    )
    c.Spawner.default_url = "/lab"
    # One Unix account per learner (PAM and the local spawner, JupyterHub's defaults), or one
    # container each: see the README's Security section. A shared account would let learners
    # read each other's ipyparallel keys.
    c.JupyterHub.cleanup_servers = True
