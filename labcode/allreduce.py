"""Generated from labs/03_allreduce_algorithms.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np
from mpi4py import MPI


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


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Two speeds: hierarchical all-reduce".
def node_comms(comm, node_ranks=None):
    # (node, cross): this rank's node, and the ranks that share its local rank, one
    # per node in node order. Real nodes when the ranks span hosts with as many ranks
    # on each; else virtual nodes of node_ranks consecutive ranks (2 if p is even,
    # else 1).
    p, r = comm.Get_size(), comm.Get_rank()
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)
    hosts = len(set(comm.allgather(MPI.Get_processor_name())))
    even = len(set(comm.allgather(shared.Get_size()))) == 1
    if node_ranks is None and hosts > 1 and even:
        node = shared
    else:
        shared.Free()
        node_ranks = node_ranks or (2 if p % 2 == 0 else 1)
        if p % node_ranks:
            raise ValueError(f"{p} ranks do not make nodes of {node_ranks}: "
                             f"pick a divisor of {p}")
        node = comm.Split(r // node_ranks, r)
    return node, comm.Split(node.Get_rank(), r)


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Two speeds: hierarchical all-reduce".
def allreduce_hierarchical(node, cross, x):
    # Reduce-scatter inside the node, ring all-reduce of each chunk across the nodes,
    # all-gather inside the node. In place on the 1-D array x; returns x.
    counts = [c.size for c in np.array_split(x, node.Get_size())]
    mine = np.empty(counts[node.Get_rank()], dtype=x.dtype)
    node.Reduce_scatter(x, mine, recvcounts=counts, op=MPI.SUM)
    allreduce_ring(cross, mine)
    node.Allgatherv(mine, [x, counts])
    return x


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "Two speeds: hierarchical all-reduce".
class BoundaryComm(CountingComm):
    # A CountingComm that counts only the messages sent to a rank on another node
    # (node_of: each rank's node).
    def __init__(self, comm, node_of):
        super().__init__(comm)
        self.node_of, self.home = node_of, node_of[comm.Get_rank()]
    def Send(self, buf, dest):
        if self.node_of[dest] != self.home:
            self._count(buf)
        self.comm.Send(buf, dest=dest)
    def Sendrecv(self, sendbuf, dest, recvbuf, source):
        if self.node_of[dest] != self.home:
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
