"""Ports and network interfaces: where the cluster's sockets listen (loopback on one node).

Nothing here reads the environment: the port and the interface asked for are settings
(`dplab.cluster.settings`), and these functions check and use them.
"""
from __future__ import annotations

import errno
import socket

from .errors import InterfaceError, PortInUseError


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Raise PortInUseError if `port` on `host` cannot be bound."""
    if not 1024 <= port <= 65535:
        raise PortInUseError(f"port {port} is outside 1024-65535: pick another, or leave it unset to get a free one")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(
                    f"port {port} on {host} is already in use: pass port=None "
                    "(and unset DPLAB_PORT) to pick a free one"
                ) from None
            raise


# -- the network interface the ranks listen on -----------------------------------

def interfaces() -> dict[str, list[str]]:
    """This machine's network interfaces and their IP addresses, IPv4 ones first."""
    import psutil

    found = {}
    for name, addrs in psutil.net_if_addrs().items():
        v4 = [a.address for a in addrs if a.family == socket.AF_INET]
        v6 = [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6]
        found[name] = v4 + v6
    return found


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    for name, addrs in interfaces().items():
        if "127.0.0.1" in addrs:
            return name
    raise InterfaceError("no network interface holds 127.0.0.1: bring the loopback interface up (`ip link set lo up`)")


def interface_address(name: str) -> str:
    """The address to listen on for interface `name`: its first IPv4 address, else its first IPv6 one."""
    found = interfaces()
    if name not in found:
        raise InterfaceError(
            f"network interface {name!r} does not exist on {socket.gethostname()} "
            f"(it has: {', '.join(sorted(found))}): set DPLAB_IFACE to the interface the nodes share, "
            "or unset it on a single node, where the cluster stays on loopback"
        )
    if not found[name]:
        raise InterfaceError(
            f"network interface {name!r} on {socket.gethostname()} has no IP address: "
            "bring it up, or set DPLAB_IFACE to another interface the nodes share"
        )
    return found[name][0]


def mpi_environment(iface: str) -> dict[str, str]:
    """Environment for MPI ranks that keeps MPICH's network module on interface `iface`.

    The mpich wheel's ch4 device talks through UCX (or libfabric, with MPIR_CVAR_CH4_NETMOD=ofi),
    which opens a listening socket on every interface it finds unless told which one to use.
    It must be set before MPI starts, so it goes to mpiexec, not to a running rank.
    """
    return {"UCX_NET_DEVICES": iface, "FI_TCP_IFACE": iface, "FI_SOCKETS_IFACE": iface}


def listen_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to `host` only (not to every interface) and listening; port 0: a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(socket.SOMAXCONN)
    except OSError:
        s.close()
        raise
    return s
