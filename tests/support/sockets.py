"""The sockets processes listen on, read in each process's own network namespace; for the
network tests (tests/test_network.py) and the SLURM tests on namespace nodes (tests/slurm)."""
import contextlib
import ipaddress
import os

import psutil


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8 or ::1, also written as an IPv4-mapped IPv6 address."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _listen_table(pid: int) -> dict[int, tuple[str, int]]:
    """socket inode -> (address, port) of every listening TCP socket in pid's network namespace,
    from /proc/PID/net/tcp{,6} (psutil reads the caller's namespace's table, not the process's)."""
    table = {}
    for name, size in (("tcp", 4), ("tcp6", 16)):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{name}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                hexaddr, hexport = fields[1].split(":")
                raw = bytes.fromhex(hexaddr)  # each 32-bit word in host order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
                table[int(fields[9])] = (str(ipaddress.ip_address(raw)), int(hexport, 16))
    return table


def listening(procs) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every socket the processes listen on, each read in the
    process's own network namespace."""
    found = []
    for proc in procs:
        with contextlib.suppress(OSError, psutil.Error):
            table = _listen_table(proc.pid)
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                    if link.startswith("socket:[") and int(link[8:-1]) in table:
                        found.append((proc.name(), *table[int(link[8:-1])]))
    return sorted(set(found))
