"""The processes a test started, and waiting for them to exit (psutil); for conftest files too."""
import psutil


def descendants() -> set[int]:
    """PIDs of every live process this test process started, at any depth."""
    alive = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_until_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait for the given PIDs to exit; return those still alive."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return {p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE}


def running(cmdline: list[str]) -> list[psutil.Process]:
    """Every process on the machine whose command line is exactly `cmdline`."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == cmdline]
