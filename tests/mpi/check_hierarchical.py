"""Run under `mpiexec -n p`: Lab 3's hierarchical all-reduce equals MPI's on virtual nodes of
every size that divides p, and the bytes out of each node equal the chapter's formulas for it
and for the flat ring. Broken variants are caught: one that skips the all-reduce across
nodes, and a flat ring whose ranks alternate between nodes (not node after node), which the
flat-ring formula does not describe."""
import sys

import numpy as np
from mpi4py import MPI

from labcode.allreduce import BoundaryComm, CountingComm, allreduce_hierarchical, allreduce_ring, node_comms
from labcode.formulas import node_bytes_flat_ring, node_bytes_hierarchical

comm = MPI.COMM_WORLD
p, rank = comm.Get_size(), comm.Get_rank()
equal = counted = caught = True
for L in [d for d in range(1, p + 1) if p % d == 0]:
    node, cross = node_comms(comm, node_ranks=L)
    N = cross.Get_size()
    node_of = comm.allgather(cross.Get_rank())
    assert node_of == [r // L for r in range(p)]
    for count in (1, 5, 840, 4099):
        x = np.random.default_rng([count, rank]).integers(-99, 99, count).astype(np.float64)
        ref = np.empty_like(x)
        comm.Allreduce(x, ref, op=MPI.SUM)
        out, flat = CountingComm(cross), BoundaryComm(comm, node_of)
        equal &= np.array_equal(allreduce_hierarchical(node, out, x.copy()), ref)
        equal &= np.array_equal(allreduce_ring(flat, x.copy()), ref)
        hier_out, flat_out = node.allreduce(out.bytes), node.allreduce(flat.bytes)
        if count % p == 0:
            counted &= hier_out == node_bytes_hierarchical(x.nbytes, N)
            counted &= flat_out == node_bytes_flat_ring(x.nbytes, p, N)
        # broken: no all-reduce across nodes
        mine = np.array_split(x.copy(), L)[node.Get_rank()].copy()
        node.Reduce_scatter(x, mine, recvcounts=[c.size for c in np.array_split(x, L)], op=MPI.SUM)
        partial = np.empty_like(x)
        node.Allgatherv(mine, [partial, [c.size for c in np.array_split(x, L)]])
        if N > 1 and count > 1:
            caught &= not comm.allreduce(np.array_equal(partial, ref), op=MPI.LAND)
        # broken: ranks alternate between nodes, so every edge of the ring crosses
        if N > 1 and L > 1 and count % p == 0:
            alternate = comm.Split(0, (rank % L) * N + rank // L)
            order = alternate.allgather(rank)
            bc = BoundaryComm(alternate, [node_of[r] for r in order])
            allreduce_ring(bc, x.copy())
            caught &= node.allreduce(bc.bytes) != node_bytes_flat_ring(x.nbytes, p, N)
            alternate.Free()
    node.Free()
    cross.Free()
flags = [bool(comm.allreduce(f, op=MPI.LAND)) for f in (equal, counted, caught)]
sys.stdout.write("rank {}: equal {} counted {} caught {}\n".format(rank, *flags))
sys.stdout.flush()
