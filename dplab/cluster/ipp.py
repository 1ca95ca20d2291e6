"""The private ipyparallel internals the stuck-rank watch needs, each behind one small function.

ipyparallel (pinned at 9.2.0 in requirements.txt) offers no public way to see, while a client
waits, which engines of a task have finished, nor to end the tasks of engines we killed. The
watch (`dplab.cluster.watch`) and the cluster handle (`dplab.cluster.handle`) use these functions
and nothing else of ipyparallel's private parts. `INTERNALS` lists every private name used
here, with the function that needs it and why; `missing()` says which of them the installed
ipyparallel lacks, and tests/test_ipp.py fails with its message after an upgrade that removes
one.
"""
from __future__ import annotations

import inspect
from concurrent.futures import Future

import ipyparallel
from ipyparallel import Client
from ipyparallel.client.asyncresult import AsyncResult
from ipyparallel.client.view import DirectView


def engine_uuids(client: Client) -> dict[int, bytes]:
    """Engine id -> the engine's uuid, for every engine the client knows."""
    # Client._engines: the only record of the uuid under which the client files an engine's tasks.
    return dict(client._engines)


def fail_unfinished(client: Client) -> None:
    """End every task still waiting on an engine with an EngineError, as ipyparallel does when
    an engine dies, so that no AsyncResult (or %%px's display of it) waits forever."""
    for engine_id, uuid in engine_uuids(client).items():
        # Client._handle_stranded_msgs: what ipyparallel runs when an engine unregisters; we
        # kill engines faster than the controller notices, so we run it ourselves.
        client._handle_stranded_msgs(engine_id, uuid)


def mux_stream(client: Client):
    """The stream on which a DirectView sends its tasks."""
    # Client._mux_stream: Client.direct_view() builds only a plain DirectView; a subclass of
    # ours needs the stream it would be given.
    return client._mux_stream


def result_targets(ar: AsyncResult) -> list[int]:
    """The engine ids a task ran on, in the order of `result_children`."""
    # AsyncResult._targets: the only record of which engine each child future belongs to.
    targets = ar._targets
    return targets if isinstance(targets, list) else [targets]


def result_children(ar: AsyncResult) -> list[Future]:
    """One future per engine of the task: which engines have finished, and how."""
    # AsyncResult._children: the per-engine futures, done as each engine answers; the public
    # AsyncResult is done only when all have.
    return list(ar._children)


def result_client(ar: AsyncResult) -> Client:
    """The client a task was sent by."""
    # AsyncResult._client: to tell a task of a stopped (restarted) cluster from a current one.
    return ar._client


def adopt(ar: AsyncResult, cls: type) -> AsyncResult:
    """Make an AsyncResult that ipyparallel built an instance of `cls`, a subclass that adds
    only methods and class attributes."""
    # AsyncResult.__class__: views build their AsyncResults themselves, with no hook to choose
    # the class, so the watched one is the same object with its class swapped.
    ar.__class__ = cls
    return ar


class HookedView(DirectView):
    """A DirectView that hands every AsyncResult it makes to `self.hook(ar, code)` before it
    blocks on it or returns it (code: the cell, for execute; None for apply)."""

    def __init__(self, client: Client, targets):
        super().__init__(client=client, socket=mux_stream(client), targets=targets)

    def hook(self, ar: AsyncResult, code: str | None) -> AsyncResult:
        return ar

    def execute(self, code, silent=True, targets=None, block=None, label=None):
        block = self.block if block is None else block
        ar = self.hook(super().execute(code, silent=silent, targets=targets, block=False, label=label), code)
        if block:
            ar.get()
            ar.wait_for_output()
        return ar

    # DirectView._really_apply: apply, apply_sync and apply_async all end here, and overriding it
    # is the only way to see their AsyncResult before a blocking call waits on it.
    def _really_apply(self, f, args=None, kwargs=None, targets=None, block=None, track=None, label=None):
        block = self.block if block is None else block
        ar = self.hook(super()._really_apply(f, args, kwargs, targets=targets, block=False, track=track,
                                             label=label), None)
        return ar.get() if block else ar


# -- what an upgrade may break ------------------------------------------------------

def _sets(cls: type, name: str) -> bool:
    """True when the class's own source assigns self.<name> (an attribute made at run time)."""
    try:
        return f"self.{name} =" in inspect.getsource(cls)
    except (OSError, TypeError):
        return False


def _has_parameters(fn, *names: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params for n in names)


def _class_can_be_swapped() -> bool:
    class Probe(AsyncResult):
        pass

    ar = Future.__new__(AsyncResult)
    try:
        ar.__class__ = Probe
    except TypeError:
        return False
    return True


#: (the internal, the function or class here that needs it, why, the check that it still exists)
INTERNALS = (
    ("Client._engines", "engine_uuids", "to end the tasks of killed engines",
     lambda: hasattr(Client, "_engines")),
    ("Client._handle_stranded_msgs", "fail_unfinished", "to end the tasks of killed engines",
     lambda: _has_parameters(getattr(Client, "_handle_stranded_msgs", None), "eid", "uuid")),
    ("Client._mux_stream", "mux_stream", "to build the watched DirectView",
     lambda: _sets(Client, "_mux_stream")),
    ("DirectView._really_apply", "HookedView", "to watch apply's results",
     lambda: _has_parameters(getattr(DirectView, "_really_apply", None), "f", "args", "kwargs", "targets",
                             "block", "track", "label")),
    ("AsyncResult._targets", "result_targets", "to tell which ranks finished",
     lambda: _sets(AsyncResult, "_targets")),
    ("AsyncResult._children", "result_children", "to tell which ranks finished",
     lambda: _sets(AsyncResult, "_children")),
    ("AsyncResult._client", "result_client", "to tell a stopped cluster's task from a current one",
     lambda: _sets(AsyncResult, "_client")),
    ("AsyncResult.__class__ assignment", "adopt", "to make ipyparallel's results watched ones",
     _class_can_be_swapped),
)


def missing() -> list[str]:
    """One message for each internal that the installed ipyparallel no longer has."""
    return [f"ipyparallel {ipyparallel.__version__} removed {name}, which dplab.cluster.ipp.{user} needs "
            f"({why}): adapt dplab/cluster/ipp.py, or pin ipyparallel==9.2.0 again"
            for name, user, why, present in INTERNALS if not present()]
