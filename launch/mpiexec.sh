#!/usr/bin/env bash
# mpiexec starts the ranks on this machine; MPICH's Hydra gives each one PMI_RANK,
# PMI_SIZE and MPI_LOCALRANKID, which this recipe renames to what torch reads.
set -euo pipefail
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=$(python -c \
  "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])")
mpiexec -n 2 bash -c 'RANK=$PMI_RANK WORLD_SIZE=$PMI_SIZE LOCAL_RANK=$MPI_LOCALRANKID \
  exec python launch/train.py'
