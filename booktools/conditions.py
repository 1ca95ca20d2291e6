"""The conditions a pass of the labs runs under, and their registry.

    parse("torch=2.8.0,other-cpu,busy")   -> Pass: the conditions of one pass, checked together

Each condition is a small frozen dataclass implementing `Condition`: it parses its spelling,
adds to the pass's environment, is checked before anything starts, sets up before its pass,
runs something beside the pass (a context manager), tears down after it, and says whether the
stored outputs stay comparable under it (then the pass runs nbval; else every lab runs, asserts
only). `booktools.run` runs the passes. A new condition is one class here and its line in
REGISTRY.

    p=N          DPLAB_ENGINES=N; comparable only at the default p (dplab.cluster.settings)
    other-cpu    another CPU, simulated: ATen's scalar kernels, MKL's compatible code path, 1
                 thread in the notebook and 2 per engine (each changes float results)
    busy         one process keeps one core busy beside the pass (a neighbour on a shared node)
    two, two=N   a second learner runs every lab, asserts only, in its own copy and with its own
                 cluster, at the default p or at N, beside the pass; both must pass
    two=N@X.Y.Z  the same, the second learner on that release of torch (as torch=X.Y.Z installs it)
    torch=X.Y.Z  that release, installed once into .torch/X.Y.Z/ (booktools.releases), first on
                 PYTHONPATH for the kernels and their engines
    gpu          NCCL with one engine per GPU, then 4 engines sharing GPU 0 on gloo, one after
                 the other (booktools.gpu); refused before anything starts with no GPU visible
    offline      with gpu: a GPU machine with no network and no venv (tools/gpu_offline/run.sh)
    quiet        nothing: a plain run (the load matrix repeats it)

Nothing a condition starts outlives the runner, even killed with SIGKILL (booktools.children).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from typing import Callable, ClassVar, Iterator, Protocol

from booktools.children import end_tree, start_leaf

#: How long a second learner may take, whole, from its start; then it is killed and its
#: unfinished labs fail (the slowest lab takes about two minutes beside another learner).
LEARNER_LIMIT_S = 1800
#: The busy process: pure Python arithmetic, on one core, until its parent ends.
BURNER = "while True:\n    sum(range(20000))\n"


class Refused(ValueError):
    """A pass that cannot run, said with what to do, before anything starts."""


class Condition(Protocol):
    """One condition of a pass; the defaults below are those of a condition that only sets
    variables (or nothing)."""

    #: its name in --on, before any '='
    kind: ClassVar[str]
    #: how --on writes it, for the list of known conditions
    written: ClassVar[str]

    @classmethod
    def parse(cls, value: str | None) -> Condition:
        """The condition its spelling names, with the value after '=' (None: no '=')."""
        return cls()

    @property
    def spelling(self) -> str:
        """How --on writes this one: 'p=3'."""
        return self.kind

    @property
    def comparable(self) -> bool:
        """Whether the stored outputs stay comparable under it (the pass then runs nbval)."""
        return True

    def environment(self) -> dict[str, str]:
        """What it adds to the environment of the pass (and of whatever runs beside it)."""
        return {}

    def conflict(self, others: list[Condition]) -> str | None:
        """Why it cannot run with the other conditions of its pass; None if it can."""
        return None

    def check(self) -> None:
        """Raise Refused on what this machine lacks for it, before any pass starts."""

    def set_up(self, say: Callable[[str], None]) -> None:
        """Before its pass."""

    def releases(self) -> tuple[str, ...]:
        """The torch releases (X.Y.Z) it needs installed: the runner installs every pass's at
        once, before the first pass, and set_up then finds them."""
        return ()

    def settings(self, say: Callable[[str], None]) -> list[tuple[str, dict[str, str]]] | None:
        """The settings (name, environment) its pass runs one after the other, lab by lab; None: one."""
        return None

    @contextlib.contextmanager
    def beside(self, labs: list, env: dict[str, str], column: str, say: Callable[[str], None]) -> Iterator[list]:
        """Run something beside the pass; yields the rows (booktools.learners.Row) of the labs
        it ran, complete once the block has ended."""
        yield []

    def tear_down(self, say: Callable[[str], None]) -> None:
        """After its pass."""

    def instead(self, labs: list) -> list[str] | None:
        """A command that runs the whole pass in the runner's place; None: the runner runs it."""
        return None


@dataclass(frozen=True)
class EngineCount(Condition):
    """p=N: the labs' clusters start N engines."""

    engines: int
    kind: ClassVar[str] = "p"
    written: ClassVar[str] = "p=N"

    @classmethod
    def parse(cls, value: str | None) -> EngineCount:
        return cls(engine_count("p", value))

    @property
    def spelling(self) -> str:
        return f"p={self.engines}"

    @property
    def comparable(self) -> bool:
        from dplab.cluster.settings import DEFAULT_ENGINES

        return self.engines == DEFAULT_ENGINES

    def environment(self) -> dict[str, str]:
        return {"DPLAB_ENGINES": str(self.engines)}


@dataclass(frozen=True)
class OtherCpu(Condition):
    """other-cpu: another CPU, simulated; each variable changes float results."""

    kind: ClassVar[str] = "other-cpu"
    written: ClassVar[str] = "other-cpu"
    ENVIRONMENT: ClassVar[dict[str, str]] = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                             "OMP_NUM_THREADS": "1", "DPLAB_THREADS": "2"}

    def environment(self) -> dict[str, str]:
        return dict(self.ENVIRONMENT)


@dataclass(frozen=True)
class BusyCore(Condition):
    """busy: one process keeps one core busy beside the pass."""

    kind: ClassVar[str] = "busy"
    written: ClassVar[str] = "busy"

    @contextlib.contextmanager
    def beside(self, labs, env, column, say) -> Iterator[list]:
        import sys

        burner = start_leaf([sys.executable, "-c", BURNER])
        say(f"busy: process {burner.pid} keeps one core busy beside {column}")
        try:
            yield []
        finally:
            end_tree(burner.pid)


@dataclass(frozen=True)
class SecondLearner(Condition):
    """A second learner runs every lab beside the pass, asserts only, with its own cluster.

    At the default p or at N, on the pass's torch or on release X.Y.Z."""

    engines: int | None = None
    torch: str | None = None
    kind: ClassVar[str] = "two"
    written: ClassVar[str] = "two, two=N, two=N@X.Y.Z"

    @classmethod
    def parse(cls, value: str | None) -> SecondLearner:
        if value is None:
            return cls()
        count, at, version = value.partition("@")
        if at:
            TorchRelease.parse(version)  # refused as torch=X.Y.Z would be
        return cls(engine_count("two", count), version or None)

    @property
    def spelling(self) -> str:
        at = f"@{self.torch}" if self.torch else ""
        return "two" if self.engines is None else f"two={self.engines}{at}"

    def check(self) -> None:
        if self.torch:
            TorchRelease(self.torch).check()

    def set_up(self, say) -> None:
        if self.torch:
            TorchRelease(self.torch).set_up(say)

    def releases(self) -> tuple[str, ...]:
        return (self.torch,) if self.torch else ()

    @contextlib.contextmanager
    def beside(self, labs, env, column, say) -> Iterator[list]:
        from booktools.learners import Learner, summary

        own = {k: v for k, v in env.items() if k != "DPLAB_ENGINES"}
        if self.engines is not None:
            own["DPLAB_ENGINES"] = str(self.engines)
        if self.torch:
            own.update(TorchRelease(self.torch).environment())
        p = "the default p" if self.engines is None else f"p = {self.engines}"
        on = f", on torch {self.torch}" if self.torch else ""
        say(f"second learner: every lab at {p}{on}, asserts only, beside {column}")
        learner = Learner(labs, [(f"{column}: second learner", {})], own, LEARNER_LIMIT_S, say)
        rows: list = []
        try:
            yield rows
        except BaseException:
            rows += learner.wait(timeout=0)
            raise
        say(f"second learner: {column} ended; waiting for its labs (at most {LEARNER_LIMIT_S} s in all)")
        rows += learner.wait()
        say(summary(rows))


@dataclass(frozen=True)
class TorchRelease(Condition):
    """torch=X.Y.Z: that release of torch, installed once beside the venv and first on PYTHONPATH."""

    version: str
    kind: ClassVar[str] = "torch"
    written: ClassVar[str] = "torch=X.Y.Z"

    @classmethod
    def parse(cls, value: str | None) -> TorchRelease:
        from booktools.releases import not_a_release

        why = not_a_release(value or "")
        if why:
            raise Refused(why)
        return cls(value)

    @property
    def spelling(self) -> str:
        return f"torch={self.version}"

    def environment(self) -> dict[str, str]:
        from booktools.releases import folder, in_venv

        if in_venv(self.version):  # the venv's own torch is this release
            return {}
        return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder(self.version)),
                                                            os.environ.get("PYTHONPATH")]))}

    def check(self) -> None:
        from booktools import releases

        if not releases.installed(self.version) and not releases.in_venv(self.version):
            why = releases.problem(self.version, releases.free_bytes())
            if why:
                raise Refused(why)

    def set_up(self, say) -> None:
        from booktools import releases

        if releases.in_venv(self.version):
            say(f"torch={self.version}: the venv's own torch, nothing installed")
            return
        releases.install(self.version, say)
        say(f"torch={self.version}: torch {releases.imported_version(self.version)}, from "
            f".torch/{self.version}/")

    def releases(self) -> tuple[str, ...]:
        return (self.version,)


@dataclass(frozen=True)
class Gpu(Condition):
    """gpu: NCCL with one engine per GPU, then 4 engines sharing GPU 0 on gloo (rehearse: both on the CPU)."""

    rehearse: bool = False
    kind: ClassVar[str] = "gpu"
    written: ClassVar[str] = "gpu"

    @property
    def comparable(self) -> bool:
        return False  # the stored outputs are the CPU's

    def conflict(self, others: list[Condition]) -> str | None:
        kinds = {o.kind for o in others}
        if "two" in kinds:
            return ("gpu runs its settings one after the other, alone: at once, GPU 0 carried NCCL's "
                    "rank 0 and every gloo engine, and rank 0 became a straggler")
        clash = sorted(kinds & {"p", "other-cpu"})
        if clash:
            return f"gpu sets its own engine and thread counts: drop {', '.join(clash)}"
        return None

    def check(self) -> None:
        from booktools.gpu import problem_here

        why = None if self.rehearse else problem_here()
        if why:
            raise Refused(why)

    def settings(self, say) -> list[tuple[str, dict[str, str]]]:
        from booktools.gpu import gpu_settings

        return gpu_settings(say, rehearse=self.rehearse)

    def tear_down(self, say) -> None:
        from booktools.gpu import lab_processes

        left = lab_processes()
        if left:
            say("gpu: still running on this machine after the pass: " + "; ".join(left))


@dataclass(frozen=True)
class Offline(Condition):
    """offline: with gpu, a GPU machine with no network and no venv (tools/gpu_offline/run.sh)."""

    kind: ClassVar[str] = "offline"
    written: ClassVar[str] = "offline"

    @property
    def comparable(self) -> bool:
        return False

    def conflict(self, others: list[Condition]) -> str | None:
        if [o.kind for o in others] != ["gpu"]:
            return "offline goes with gpu alone: --on gpu,offline"
        return None

    def instead(self, labs: list) -> list[str]:
        return ["bash", "tools/gpu_offline/run.sh", *(str(lab.path) for lab in labs)]


@dataclass(frozen=True)
class Quiet(Condition):
    """quiet: nothing, a plain run (for repeated passes of the load matrix)."""

    kind: ClassVar[str] = "quiet"
    written: ClassVar[str] = "quiet"

    def conflict(self, others: list[Condition]) -> str | None:
        return "quiet is a plain run: it takes no other condition" if others else None


REGISTRY: dict[str, type] = {cls.kind: cls for cls in (EngineCount, OtherCpu, BusyCore, SecondLearner,
                                                        TorchRelease, Gpu, Offline, Quiet)}
KNOWN = ", ".join(cls.written for cls in REGISTRY.values())
#: The conditions whose spelling takes a value after '='.
VALUED = {"p", "torch", "two"}


def engine_count(kind: str, value: str | None) -> int:
    """An engine count, checked as the labs' clusters check DPLAB_ENGINES."""
    from dplab.cluster.errors import ClusterError
    from dplab.cluster.settings import Settings

    if value is None:
        raise Refused(f"{kind}: name the engine count, {kind}=3")
    try:
        return Settings.read("p", value)
    except ClusterError as e:
        raise Refused(f"{kind}={value}: {e}") from None


def condition(text: str) -> Condition:
    """One condition from its spelling; Refused, naming the known ones, if there is none such."""
    kind, eq, value = text.strip().partition("=")
    cls = REGISTRY.get(kind)
    if cls is None:
        hint = (" (name the notebooks apart from --on's passes: --on \"p=1 p=3\" labs/NN_lab.ipynb)"
                if text.endswith(".ipynb") else "")
        raise Refused(f"unknown condition {text!r}{hint}: the conditions are {KNOWN}")
    if eq and kind not in VALUED:
        raise Refused(f"{kind} takes no value ({text!r}): the conditions are {KNOWN}")
    return cls.parse(value if eq else None)


@dataclass(frozen=True)
class Pass:
    """The conditions of one pass over the labs, checked together."""

    conditions: tuple[Condition, ...]

    @property
    def spelling(self) -> str:
        return ",".join(c.spelling for c in self.conditions)

    @property
    def comparable(self) -> bool:
        """nbval compares the stored outputs: every condition keeps them comparable."""
        return all(c.comparable for c in self.conditions)

    def environment(self) -> dict[str, str]:
        """What the conditions add to the environment."""
        env: dict[str, str] = {}
        for c in self.conditions:
            env.update(c.environment())
        return env

    def of(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.kind == kind), None)

    def rehearsed(self) -> Pass:
        """The same pass, its gpu rehearsed on the CPU."""
        return Pass(tuple(replace(c, rehearse=True) if isinstance(c, Gpu) else c for c in self.conditions))


def parse(spec: str) -> Pass:
    """A pass from its comma-joined conditions; Refused if one is unknown, given twice, or
    contradicts another."""
    texts = [t for t in spec.split(",") if t.strip()]
    if not texts:
        raise Refused(f"an empty pass: name its conditions (quiet for none): the conditions are {KNOWN}")
    conditions = [condition(t) for t in texts]
    kinds = [c.kind for c in conditions]
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise Refused(f"{spec}: {', '.join(twice)} given twice in one pass (passes are separated by spaces)")
    set_by: dict[str, tuple[str, str]] = {}
    for c in conditions:
        why = c.conflict([o for o in conditions if o is not c])
        if why:
            raise Refused(f"{spec}: {why}")
        for var, value in c.environment().items():
            if var in set_by and set_by[var][1] != value:
                raise Refused(f"{spec}: {set_by[var][0]} and {c.spelling} both set {var}")
            set_by[var] = (c.spelling, value)
    return Pass(tuple(conditions))


def passes(words: list[str]) -> list[Pass]:
    """The passes of --on, in order: each word a pass."""
    specs = [w.strip() for w in words if w.strip()]
    if not specs:
        raise Refused(f"--on names no pass: the conditions are {KNOWN}")
    return [parse(s) for s in specs]
