#!/usr/bin/env bash
# Two nodes, 2 workers each: one torchrun agent per node, the same command on each. They
# meet at the c10d rendezvous on the first node's host:port; the agent on that host runs
# the store. Here both "nodes" are this machine, so the script starts both agents.
set -euo pipefail
head=${HEAD:-127.0.0.1}  # on a cluster: the first node's host name
port=$(python -c \
  "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])")
agent() {
  torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
    --rdzv-endpoint "$head:$port" --rdzv-id "job-$port" launch/train.py
}
# An agent that fails must not leave the other one waiting.
trap 'status=$?; kill $(jobs -p) 2>/dev/null || :; exit $status' EXIT
agent &  # node 0
agent &  # node 1
wait -n && wait -n  # fails if either agent fails
