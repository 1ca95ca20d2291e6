"""ipyparallel's private internals that dplab.cluster.ipp uses: all still there, or a clear failure."""
import pytest
from ipyparallel import Client
from ipyparallel.client.asyncresult import AsyncResult

from dplab.cluster import ipp


def test_every_ipyparallel_internal_the_watch_needs_is_still_there():
    assert ipp.missing() == [], "\n".join(ipp.missing())


@pytest.mark.parametrize("owner, name, message", [
    (Client, "_engines", "removed Client._engines, which dplab.cluster.ipp.engine_uuids needs"),
    (Client, "_handle_stranded_msgs",
     "removed Client._handle_stranded_msgs, which dplab.cluster.ipp.fail_unfinished needs"),
])
def test_an_upgrade_that_removes_one_fails_naming_it_and_its_user(monkeypatch, owner, name, message):
    monkeypatch.delattr(owner, name)
    assert [m for m in ipp.missing() if message in m] != [], ipp.missing()
    assert len(ipp.missing()) == 1


def test_attributes_made_at_run_time_and_the_class_swap_are_checked_too(monkeypatch):
    """AsyncResult._children exists only once __init__ ran: the check reads the class's source."""
    real = ipp.inspect.getsource
    source = real(AsyncResult).replace("self._children =", "self._kids =")
    monkeypatch.setattr(ipp.inspect, "getsource", lambda obj: source if obj is AsyncResult else real(obj))
    assert any("removed AsyncResult._children, which dplab.cluster.ipp.result_children needs" in m
               for m in ipp.missing())
