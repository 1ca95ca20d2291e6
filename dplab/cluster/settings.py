"""The run settings, read once: one frozen `Settings`, and the backend policy.

Each setting is one field of `Settings` below, described there once: its `DPLAB_*` variable,
its default, the function that checks a value, and a line of documentation. This table, the
README's and `help(dplab.start_cluster)` are written from those fields (`describe()`;
`python -m dplab.cluster.settings` prints it). A new setting is one field here, plus its use.

- `Settings.resolve(**overrides)` is what `dplab.start_cluster` calls: keyword overrides
  first, then the environment, then the defaults; it checks everything, and what this
  machine must offer (a free port, the interface), before any process starts.
- `Settings.for_job(**overrides)` is the same for an MPI job (a benchmark, a test script):
  inside `mpiexec`/`srun`, p is the size of the MPI world and the port is the `DPLAB_PORT`
  that `dplab.cluster.jobs.run_job` sets; outside, it checks the settings of the job this
  process is about to start.
- `Settings.read(name)` reads one setting where no cluster is involved.
- `mnist_folder(root)` is the data's one setting, not the cluster's: `dplab.data` reads
  `DPLAB_MNIST` with it on whichever process loads the data (the engines inherit the kernel's
  environment, so nothing hands it to them).

No other module reads a `DPLAB_*` variable (tests/test_settings_reads.py scans the repository
for it). The resolved object is passed whole: to the launchers, to the engines
(`dplab.cluster.engine.setup`, so it pickles), to the watch and to MPI jobs.

The backend policy, in one place (`choose_backend`): NCCL when every rank owns a GPU, else
Gloo, on the GPUs when there are some (several ranks then share one) or on the CPU. The hub
sample (hub/jupyterhub_config.py) uses it too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Callable

from .errors import BackendError, ClusterError, InterfaceError

DEFAULT_ENGINES = 4
#: How long a rank waits for the others in the rendezvous and, by default, in any collective.
TIMEOUT_S = 120
STUCK_AFTER_S = 3.0
DEFAULT_NODES = 2
BACKENDS = ("gloo", "nccl", "mpi")
DEVICES = ("cpu", "cuda")
#: The values TORCH_DISTRIBUTED_DEBUG accepts. DETAIL checks before every collective that all
#: ranks call the same one on tensors of the same shape, and raises on every rank if not.
DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")
#: The launchers' names; dplab.cluster.start maps each to its start function.
LAUNCHERS = ("mpiexec", "slurm", "allocation")


# -- the policies ------------------------------------------------------------------

def max_engines() -> int:
    """The largest engine count we accept: four ranks per core, at least 8."""
    return max(8, 4 * (os.cpu_count() or 1))


def threads_per_rank(ranks_on_node: int, cores: int | None = None) -> int:
    """Torch threads for each of `ranks_on_node` ranks when none is asked for: the node's cores
    shared among them, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, ranks_on_node))


@dataclass(frozen=True)
class BackendChoice:
    """The backend and device every rank will use."""

    backend: str
    device: str


def count_gpus() -> int:
    """Return the number of CUDA devices this process (and so its engines) can see."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def choose_backend(
    n_ranks: int, n_gpus: int, backend: str | None = None, device: str | None = None,
    shared_gpus: bool = False,
) -> BackendChoice:
    """Return NCCL when every rank owns a GPU, else Gloo (on shared GPUs or the CPU).

    n_ranks: ranks on the busiest node; n_gpus: GPUs they see. shared_gpus: the GPUs are
    shared with other jobs (a hub's learners), so no rank owns one.
    """
    if backend is not None and backend not in BACKENDS:
        raise BackendError(
            f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}, "
            "or leave it unset (DPLAB_BACKEND) to choose automatically"
        )
    if device is not None and device not in DEVICES:
        raise BackendError(
            f"unknown device {device!r}: use 'cpu' or 'cuda', "
            "or leave it unset (DPLAB_DEVICE) to choose automatically"
        )
    if device == "cuda" and n_gpus == 0:
        raise BackendError(
            "device 'cuda' asked for, but no GPU is visible: use device='cpu' "
            "or run on a machine with a GPU (check CUDA_VISIBLE_DEVICES)"
        )
    if backend == "nccl":
        if device == "cpu":
            raise BackendError("NCCL works on GPU tensors only: use backend='gloo' for device='cpu'")
        if n_gpus == 0:
            raise BackendError("NCCL works on GPUs only, and no GPU is visible: use backend='gloo' "
                               "(check CUDA_VISIBLE_DEVICES if this machine has GPUs)")
        if n_gpus < n_ranks:
            raise BackendError(
                f"NCCL needs one GPU per rank, but {n_ranks} ranks see {n_gpus} GPU(s): "
                f"start at most {n_gpus} engines, or use backend='gloo' to share GPUs or run on the CPU"
            )
        return BackendChoice("nccl", "cuda")
    if backend == "mpi":
        import torch.distributed as dist

        if not dist.is_mpi_available():
            raise BackendError(
                "this torch build has no MPI backend (the PyPI wheels never do): "
                "use backend='gloo', and mpi4py for MPI itself"
            )
        return BackendChoice("mpi", device or "cpu")
    if backend is None and device != "cpu" and not shared_gpus and n_gpus >= n_ranks > 0:
        return BackendChoice("nccl", "cuda")
    if device is None:
        device = "cuda" if n_gpus > 0 else "cpu"
    return BackendChoice("gloo", device)


def in_mpi_job() -> bool:
    """True when this process is one rank of an MPI job (mpiexec, or a task of an srun step).

    A SLURM batch script, and a notebook server that runs in one (hub/jupyterhub_slurm_config.py),
    also has SLURM_PROCID=0: it counts only inside a job step, which sets SLURM_STEP_ID.
    """
    env = os.environ
    return (any(k in env for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
            or ("SLURM_PROCID" in env and "SLURM_STEP_ID" in env))


# -- checking one value: each takes the raw value (an argument, or the variable's text),
#    the setting's name and its variable, and returns the value or raises ---------------

def _engine_count(raw, name: str, env: str) -> int:
    try:
        count = int(raw)
        if isinstance(raw, float) and raw != count:
            raise ValueError
    except (TypeError, ValueError):
        raise ClusterError(f"engine count must be a whole number, got {raw!r}: set {name}= or {env}") from None
    cap = max_engines()
    if not 1 <= count <= cap:
        raise ClusterError(
            f"engine count {count} is outside 1..{cap} (four per core on this {os.cpu_count()}-core machine): "
            f"set {name}= or {env} to a value in that range"
        )
    return count


def _whole_at_least_one(what: str, hint: str = "") -> Callable:
    def parse(raw, name: str, env: str) -> int:
        try:
            count = int(raw)
        except (TypeError, ValueError):
            count = 0
        if count < 1 or str(count) != str(raw).strip():
            raise ClusterError(f"{what} must be a whole number >= 1, got {raw!r}: fix {name}= or {env}{hint}")
        return count
    return parse


def _seconds(lo: float, hi: float) -> Callable:
    def parse(raw, name: str, env: str) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not lo <= value <= hi:
            raise ClusterError(f"{name} must be a number of seconds in {lo:g}..{hi:g}, got {raw!r}: "
                               f"fix the argument or {env}, or unset it")
        return value
    return parse


def _port(raw, name: str, env: str) -> int:
    text = str(raw).strip()
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ClusterError(f"{env}={raw!r} is not a port number: set {name}= or {env} to 1..65535, "
                           "or unset both to let rank 0 pick a free one")
    return int(text)


def _auto(raw, name: str, env: str) -> str | None:
    """A name, or None for "auto" (choose_backend decides, and checks the name)."""
    text = str(raw).strip()
    return None if text in ("", "auto") else text


def _debug(raw, name: str, env: str) -> str:
    level = str(raw).upper()
    if level not in DEBUG_LEVELS:
        raise ClusterError(f"{name} must be one of {', '.join(DEBUG_LEVELS)}, got {raw!r}: "
                           f"fix {name}= or {env}, or unset it")
    return level


def _launcher(raw, name: str, env: str) -> str:
    if raw not in LAUNCHERS:
        raise ClusterError(f"unknown launcher {raw!r}: use one of {', '.join(LAUNCHERS)}, "
                           f"or unset {name}= and {env} for mpiexec on this machine")
    return raw


def _text(raw, name: str, env: str) -> str:
    return str(raw)


_entries = _whole_at_least_one("the Flight Recorder's entry count", ", or set 0 (or unset it) to turn it off")


def _flight_entries(raw, name: str, env: str) -> int | None:
    """Entries per rank, or None (off) for 0; refused where this torch cannot record Gloo."""
    if str(raw).strip() == "0":
        return None
    entries = _entries(raw, name, env)
    from .flight import torch_problem

    if problem := torch_problem():
        raise ClusterError(f"{name}={raw!r} asks for the Flight Recorder, but {problem}: upgrade torch, "
                           f"or unset {name}= and {env}")
    return entries


def setting(env: str, default, parse: Callable, doc: str, default_doc: str):
    """One setting: its variable, its default, the function that checks it, and its docs."""
    return field(default=default, metadata={"env": env, "parse": parse, "doc": doc, "default_doc": default_doc})


@dataclass(frozen=True)
class Settings:
    """Every run setting, decided before any process starts; passed whole to launchers, engines
    and jobs. Fields are in the order of the README's table."""

    p: int = setting("DPLAB_ENGINES", DEFAULT_ENGINES, _engine_count,
                     "engines (MPI ranks) to start", str(DEFAULT_ENGINES))
    backend: str = setting("DPLAB_BACKEND", "gloo", _auto,
                           "`gloo`, `nccl` or `mpi` (`mpi` needs a PyTorch built with MPI)",
                           "NCCL if every rank owns a GPU, else Gloo")
    device: str = setting("DPLAB_DEVICE", "cpu", _auto, "`cpu` or `cuda`",
                          "`cuda` if a GPU is visible, else `cpu`")
    port: int | None = setting("DPLAB_PORT", None, _port, "rendezvous port (`MASTER_PORT`)",
                               "a free port per cluster, which rank 0 picks")
    threads: int | None = setting(
        "DPLAB_THREADS", None, _whole_at_least_one("thread count", ", or unset it to share the cores among the ranks"),
        "torch threads per engine; when engines × threads exceed the cores, the engines get "
        "`OMP_WAIT_POLICY=PASSIVE` (unless you set it) so idle threads sleep instead of spinning",
        "the node's cores shared among its engines")
    timeout: float | None = setting("DPLAB_TIMEOUT", None, _seconds(1, 24 * 3600),
                                    "seconds a collective waits before it raises (on NCCL, the watchdog's timeout)",
                                    str(TIMEOUT_S))
    debug: str | None = setting("DPLAB_DEBUG", None, _debug,
                                "`TORCH_DISTRIBUTED_DEBUG` on the engines: `OFF`, `INFO` or `DETAIL` (checks that "
                                "all ranks call the same collective on the same shapes)", "unset")
    stuck_after: float = setting("DPLAB_STUCK_AFTER", STUCK_AFTER_S, _seconds(0.5, 3600),
                                 "seconds after a rank fails before ranks still blocked in a collective count as "
                                 "stuck", f"{STUCK_AFTER_S:g}")
    flight_recorder: int | None = setting(
        "DPLAB_FLIGHT_RECORDER", None, _flight_entries,
        "collectives each rank's PyTorch Flight Recorder keeps (`TORCH_FR_BUFFER_SIZE`); when ranks are stuck, "
        "every rank's buffer is saved for `dplab.analyze_flight_records()` (`StuckRanksError.flight_records`)",
        "unset: torch's own ring (2000 collectives from torch 2.11 on, none before), not saved by the kit")
    iface: str | None = setting(
        "DPLAB_IFACE", None, _text,
        "the network interface the nodes share (`ib0`, `eth1`, …), used only when ranks run on several nodes: "
        "the rendezvous store, Gloo, NCCL and MPI listen on it alone. On one node it changes nothing: everything "
        "stays on loopback (see [Security](#security)). It must exist on the machine that starts the cluster, "
        "with an address", "unset")
    launcher: str = setting("DPLAB_LAUNCHER", "mpiexec", _launcher,
                            "`mpiexec` (engines on this machine), `slurm` (engines in an sbatch job of their own) or "
                            "`allocation` (engines in the SLURM job this notebook runs in); see "
                            "[Running on a SLURM cluster](#running-on-a-slurm-cluster)", "`mpiexec`")
    nodes: int | None = setting("DPLAB_NODES", None, _whole_at_least_one("nodes"),
                                "nodes to run the engines on: to ask SLURM for (`slurm`), or of this job "
                                "(`allocation`)", f"{DEFAULT_NODES} (`slurm`), all of the job's (`allocation`)")
    partition: str | None = setting("DPLAB_PARTITION", None, _text, "the SLURM partition",
                                    "the cluster's default partition")

    # -- resolving ------------------------------------------------------------------
    @classmethod
    def resolve(cls, env: dict[str, str] | None = None, /, **overrides) -> "Settings":
        """The settings for a cluster started from this machine: overrides, then `env`
        (default: os.environ), then defaults; raises before anything starts."""
        values = _requested(overrides, os.environ if env is None else env)
        p = values.setdefault("p", DEFAULT_ENGINES)
        backend, device = values.get("backend"), values.get("device")
        n_gpus = 0 if device == "cpu" and backend in (None, "gloo") else count_gpus()
        choice = choose_backend(p, n_gpus, backend, device)
        values.update(backend=choice.backend, device=choice.device)
        if values.get("flight_recorder") and choice.backend == "mpi":
            raise ClusterError("the Flight Recorder records Gloo's and NCCL's collectives, not MPI's: use "
                               "backend='gloo', or unset flight_recorder= and DPLAB_FLIGHT_RECORDER")
        if values.get("iface") is not None:  # it must exist here, with an address
            from .network import interface_address

            try:
                interface_address(values["iface"])
            except InterfaceError as e:
                raise ClusterError(str(e)) from None
        if values.get("port") is not None:
            from .network import check_port_free

            check_port_free(values["port"])
        return cls(**values)

    @classmethod
    def for_job(cls, env: dict[str, str] | None = None, /, **overrides) -> "Settings":
        """The settings of an MPI job (benchmark, test script); every rank must call it.

        Inside mpiexec or srun: p is the MPI world's size, the port DPLAB_PORT (set by
        dplab.cluster.jobs.run_job; unset: rank 0 picks one), and backend and device follow
        choose_backend for the busiest node's ranks and the GPUs of the node with fewest, so
        every rank decides the same. Outside a job: the settings of a job of p ranks on this
        node (p from the argument or DPLAB_ENGINES), to check before starting it.
        """
        env = os.environ if env is None else env
        comm = None
        if in_mpi_job():
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            if overrides.get("p") not in (None, comm.Get_size()):
                raise ClusterError(f"p={overrides['p']} asked for inside an MPI job of {comm.Get_size()} ranks: "
                                   "the job's size is its p; leave p out")
            values = _requested({k: v for k, v in overrides.items() if k != "p"}, env, skip=("p",))
            values["p"] = comm.Get_size()
            node = comm.Split_type(MPI.COMM_TYPE_SHARED)
            try:
                busiest = comm.allreduce(node.Get_size(), op=MPI.MAX)
            finally:
                node.Free()
        else:
            values = _requested(overrides, env)
            busiest = values.setdefault("p", DEFAULT_ENGINES)
        backend, device = values.get("backend"), values.get("device")
        n_gpus = 0 if device == "cpu" and backend in (None, "gloo") else count_gpus()
        if comm is not None:  # the node with the fewest GPUs decides, so every rank decides the same
            from mpi4py import MPI

            n_gpus = comm.allreduce(n_gpus, op=MPI.MIN)
        choice = choose_backend(busiest, n_gpus, backend, device)
        values.update(backend=choice.backend, device=choice.device)
        return cls(**values)

    @classmethod
    def read(cls, name: str, value=None, env: dict[str, str] | None = None):
        """One setting: `value` if given, else its variable, else its default; checked."""
        f = _field(name)
        values = _requested({name: value}, os.environ if env is None else env, only=(name,))
        return values.get(name, f.default)


def _fields() -> dict:
    return {f.name: f for f in fields(Settings)}


def _field(name: str):
    found = _fields()
    if name not in found:
        raise TypeError(f"unknown setting {name!r}: the settings are {', '.join(found)}")
    return found[name]


def _requested(overrides: dict, env, skip=(), only=None) -> dict:
    """The settings asked for, checked: each override, else its variable (empty: unset).
    Settings asked for by neither are left out (their defaults apply)."""
    known = _fields()
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise TypeError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
                        f"the settings are {', '.join(known)}")
    values = {}
    for name, f in known.items():
        if name in skip or (only is not None and name not in only):
            continue
        meta = f.metadata
        raw = overrides.get(name)
        if raw is None:
            raw = env.get(meta["env"]) or None
        if raw is None:
            continue
        value = meta["parse"](raw, name, meta["env"])
        if value is not None:
            values[name] = value
    return values


def to_environment(**values) -> dict[str, str]:
    """Settings as the DPLAB_* variables that give them to a child process (None: left out)."""
    known = _fields()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TypeError(f"unknown setting(s) {', '.join(unknown)}: the settings are {', '.join(known)}")
    return {known[k].metadata["env"]: str(v) for k, v in values.items() if v is not None}


def variables() -> list[str]:
    """Every DPLAB_* variable the kit reads, in the table's order."""
    return [f.metadata["env"] for f in fields(Settings)]


MNIST_VARIABLE = "DPLAB_MNIST"
MNIST_DOC = ("folder holding the four full-MNIST IDX files (the data's setting, read by "
             "`dplab.data.load_mnist`, not the cluster's)", "the offline 5,000-image subset")


def mnist_folder(root: str | None = None, env: dict[str, str] | None = None) -> str | None:
    """Where dplab.data finds full MNIST: `root` if given, else DPLAB_MNIST, else None (the
    offline subset)."""
    env = os.environ if env is None else env
    return str(root) if root else (env.get(MNIST_VARIABLE) or None)


def describe() -> str:
    """The settings as a Markdown table: variable, argument, meaning, default."""
    rows = ["| variable | argument | meaning | default |", "|---|---|---|---|"]
    for f in fields(Settings):
        m = f.metadata
        rows.append(f"| `{m['env']}` | `{f.name}` | {m['doc']} | {m['default_doc']} |")
    rows.append(f"| `{MNIST_VARIABLE}` | `load_mnist(root=)` | {MNIST_DOC[0]} | {MNIST_DOC[1]} |")
    return "\n".join(rows)


__doc__ += "\nThe settings:\n\n" + describe() + "\n"

if __name__ == "__main__":
    print(describe())
