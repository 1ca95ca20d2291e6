"""Pick the torch.distributed backend, the device, a rendezvous port and the network interface."""
from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

BACKENDS = ("gloo", "nccl", "mpi")
DEVICES = ("cpu", "cuda")


class BackendError(ValueError):
    """A backend or device request that this machine cannot honour."""


class PortInUseError(OSError):
    """The requested rendezvous port is already taken."""


class InterfaceError(ValueError):
    """A network interface (DPLAB_IFACE) that this machine does not have, or that has no address."""


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
    n_ranks: int, n_gpus: int, backend: str | None = None, device: str | None = None
) -> BackendChoice:
    """Return NCCL when every rank owns a GPU, else Gloo (on shared GPUs or the CPU)."""
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
    if backend is None and device != "cpu" and n_gpus >= n_ranks > 0:
        return BackendChoice("nccl", "cuda")
    if device is None:
        device = "cuda" if n_gpus > 0 else "cpu"
    return BackendChoice("gloo", device)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def job_port() -> int | None:
    """The rendezvous port in DPLAB_PORT, or None (unset or empty) to let rank 0 pick one."""
    raw = os.environ.get("DPLAB_PORT")
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"DPLAB_PORT={raw!r} is not a port number: set 1..65535 or unset it")
    return int(raw)


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


def job_interface() -> str | None:
    """The interface in DPLAB_IFACE, or None (unset or empty): loopback on a single node."""
    return os.environ.get("DPLAB_IFACE") or None


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
