#!/usr/bin/env bash
# Install what the private SLURM cluster needs when it is missing: Debian's slurm-wlm, munge and
# iproute2 (ip, tc), with apt-get, as root. Used by make test-slurm and make bench-nodes.
#   tools/slurm/install.sh WHO      # WHO names the caller in messages
set -uo pipefail
who=${1:-tools/slurm/install.sh}
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "$who: installing slurm-wlm, munge and iproute2 with apt-get"
  if ! command -v apt-get >/dev/null; then
    echo "$who: no apt-get here: install SLURM (slurmctld, slurmd, the client commands)," \
         "munge and iproute2 (ip, tc) with this system's package manager, then run it again" >&2
    exit 2
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge iproute2 >/dev/null \
    || { echo "$who: apt-get install slurm-wlm munge iproute2 failed" >&2; exit 2; }
fi

