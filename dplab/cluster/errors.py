"""The errors the cluster raises before or while it starts; each message says what to do next."""
from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster cannot be started as asked."""


class BackendError(ValueError):
    """A backend or device request that this machine cannot honour."""


class PortInUseError(OSError):
    """The requested rendezvous port is already taken."""


class InterfaceError(ValueError):
    """A network interface (DPLAB_IFACE) that this machine does not have, or that has no address."""
