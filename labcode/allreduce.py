"""Generated from labs/03_allreduce_algorithms.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Naive all-reduce".
def allreduce_naive(comm, x):
    p, r = comm.Get_size(), comm.Get_rank()
    own, tmp = x.copy(), np.empty_like(x)
    for k in range(1, p):
        comm.Sendrecv(own, dest=(r + k) % p, recvbuf=tmp, source=(r - k) % p)
        x += tmp
    return x


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Tree all-reduce".
def allreduce_tree(comm, x):
    p, r = comm.Get_size(), comm.Get_rank()
    tmp = np.empty_like(x)
    mask = 1
    while mask < p:                        # reduce towards rank 0
        if r & mask:
            comm.Send(x, dest=r - mask)
            break
        if r + mask < p:
            comm.Recv(tmp, source=r + mask)
            x += tmp
        mask <<= 1
    # lowest set bit: the parent is r - low
    low = r & -r if r else 1 << (p - 1).bit_length()
    if r:
        comm.Recv(x, source=r - low)
    m = low >> 1
    while m:                               # broadcast to the children r + m, m < low
        if r + m < p:
            comm.Send(x, dest=r + m)
        m >>= 1
    return x


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Ring all-reduce".
def allreduce_ring(comm, x):
    p, r = comm.Get_size(), comm.Get_rank()
    chunks = np.array_split(x, p)          # views into x, no copies
    tmp = np.empty_like(chunks[0])
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):                 # reduce-scatter
        send, recv = chunks[(r - s) % p], chunks[(r - s - 1) % p]
        buf = tmp[: recv.size]
        comm.Sendrecv(send, dest=right, recvbuf=buf, source=left)
        recv += buf
    for s in range(p - 1):  # all-gather
        comm.Sendrecv(
            chunks[(r + 1 - s) % p],
            dest=right,
            recvbuf=chunks[(r - s) % p],
            source=left,
        )
    return x


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Ring all-reduce".
ALGOS = {"naive": allreduce_naive, "tree": allreduce_tree, "ring": allreduce_ring}


# From labs/03_allreduce_algorithms.ipynb, section "Steps".
class CountingComm:
    # Forwards to an MPI communicator and counts the messages and bytes this rank sends.
    def __init__(self, comm):
        self.comm, self.messages, self.bytes = comm, 0, 0
    def Get_size(self):
        return self.comm.Get_size()
    def Get_rank(self):
        return self.comm.Get_rank()
    def _count(self, buf):
        self.messages += 1
        self.bytes += buf.nbytes
    def Send(self, buf, dest):
        self._count(buf)
        self.comm.Send(buf, dest=dest)
    def Recv(self, buf, source):
        self.comm.Recv(buf, source=source)
    def Sendrecv(self, sendbuf, dest, recvbuf, source):
        self._count(sendbuf)
        self.comm.Sendrecv(sendbuf, dest=dest, recvbuf=recvbuf, source=source)


# From labs/03_allreduce_algorithms.ipynb, section "Exercises".
def allreduce_recursive_doubling(comm, x):
    p, r = comm.Get_size(), comm.Get_rank()
    assert p & (p - 1) == 0, "recursive doubling needs p a power of two"
    tmp, mask = np.empty_like(x), 1
    while mask < p:
        comm.Sendrecv(x, dest=r ^ mask, recvbuf=tmp, source=r ^ mask)
        x += tmp
        mask <<= 1
    return x
