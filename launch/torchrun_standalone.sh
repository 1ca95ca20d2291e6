#!/usr/bin/env bash
# One node: torchrun starts 2 workers and sets every variable itself; --standalone runs
# the rendezvous store in the agent, on a free port.
set -euo pipefail
torchrun --standalone --nproc-per-node 2 launch/train.py
