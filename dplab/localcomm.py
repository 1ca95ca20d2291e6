"""p ranks in one process: threads that pass numpy buffers, for running the labs' MPI code without MPI.

`run_ranks(p, fn)` calls `fn(comm)` on p threads, one per rank, and returns their results in
rank order. `comm` offers the part of mpi4py's buffer interface that Lab 3's all-reduces use
(`Get_rank`, `Get_size`, `Send`, `Recv`, `Sendrecv`), so chapters, tests and figure scripts
play the labs' own schedules, not copies of them. Sends are eager (the buffer is copied at
once), so every schedule that is deadlock-free under MPI is deadlock-free here; a receive
that waits longer than `timeout` seconds raises instead of hanging.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, TypeVar

import numpy as np

T = TypeVar("T")


class LocalComm:
    """One rank's end of a p-rank in-process communicator."""

    def __init__(self, rank: int, size: int, boxes: dict, timeout: float):
        self._rank, self._size, self._boxes, self._timeout = rank, size, boxes, timeout

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    def Send(self, buf, dest: int) -> None:
        self._boxes[self._rank, dest].put(np.array(buf, copy=True))

    def Recv(self, buf, source: int) -> None:
        try:
            data = self._boxes[source, self._rank].get(timeout=self._timeout)
        except queue.Empty:
            raise TimeoutError(f"rank {self._rank} waited {self._timeout} s for a message from rank {source}") from None
        if data.shape != np.shape(buf):
            raise ValueError(f"rank {self._rank} got {data.shape} from rank {source} into a buffer of {np.shape(buf)}")
        buf[...] = data

    def Sendrecv(self, sendbuf, dest: int, recvbuf, source: int) -> None:
        self.Send(sendbuf, dest)
        self.Recv(recvbuf, source)


def run_ranks(p: int, fn: Callable[[LocalComm], T], timeout: float = 30.0) -> list[T]:
    """Run fn(comm) on p threads, one per rank; return the results in rank order, or raise the first error."""
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    boxes = {(s, d): queue.Queue() for s in range(p) for d in range(p)}
    results: list = [None] * p
    errors: list = [None] * p

    def body(r: int) -> None:
        try:
            results[r] = fn(LocalComm(r, p, boxes, timeout))
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(p)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, e in enumerate(errors):
        if e is not None:
            raise RuntimeError(f"rank {r} of {p} failed: {type(e).__name__}: {e}") from e
    return results
