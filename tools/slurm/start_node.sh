#!/usr/bin/env bash
# Start one node's slurmd of the private cluster in DIR, as tools/slurm/start.sh does for each
# node (the SLURM tests use it to bring back a node they killed):
#   tools/slurm/start_node.sh DIR NODE
# The node: its network namespace (nsenter, not `ip netns exec`, which remounts /sys and leaves
# slurmd without /sys/fs/cgroup), its own host name and /etc/hosts, and a /sys of its own (so
# that /sys/class/net lists its interfaces, lo and the bridge's, as UCX expects) with this
# host's cgroups moved into it. slurmd forks into the background in there, and every job step
# it starts inherits all of it.
set -euo pipefail
DIR=${1:?usage: tools/slurm/start_node.sh DIR NODE}
node=${2:?usage: tools/slurm/start_node.sh DIR NODE}
[[ -e /var/run/netns/dplab-$node ]] || { echo "start_node.sh: no namespace dplab-$node: start the cluster with tools/slurm/start.sh" >&2; exit 1; }
nsenter --net="/var/run/netns/dplab-$node" unshare --uts --mount --propagation private sh -c \
  "mount --bind '$DIR/hosts' /etc/hosts && mkdir -p '$DIR/cgroup' \
   && mount --rbind /sys/fs/cgroup '$DIR/cgroup' && mount -t sysfs sysfs /sys \
   && mount --rbind '$DIR/cgroup' /sys/fs/cgroup && umount -l '$DIR/cgroup' \
   && hostname $node && exec slurmd -f '$DIR/slurm.conf' -N $node"
