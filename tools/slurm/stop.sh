#!/usr/bin/env bash
# Stop the private SLURM cluster that tools/slurm/start.sh started from DIR: cancel its
# jobs, end every process of each node (slurmd, slurmstepd and the job's tasks all share
# that node's UTS and network namespaces), slurmctld and munged, then remove the nodes'
# network namespaces, their links (and the qdiscs on them) and the bridge. Safe to run
# twice, or on a cluster that half started. Exits non-zero if something would not go away.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
DIR=$(realpath -m "${1:-${DPSLURM_DIR:-$here/../../_build/slurm}}")
[[ -d $DIR ]] || exit 0

pid_in() { [[ -f $1 ]] && cat "$1" 2>/dev/null; }
alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

# Every process in the UTS namespaces of our slurmd daemons, or in the nodes' network
# namespaces: the nodes' own processes.
node_pids() {
  local ns p
  for p in /proc/[0-9]*; do
    for ns in "${node_ns[@]}"; do
      if [[ $(readlink "$p/ns/uts" 2>/dev/null) == "$ns" || $(readlink "$p/ns/net" 2>/dev/null) == "$ns" ]]; then
        echo "${p#/proc/}"
        break
      fi
    done
  done
}
IFACE=
NODES=()
[[ -f $DIR/network ]] && source "$DIR/network"
node_ns=()
for f in "$DIR"/slurmd-*.pid; do
  p=$(pid_in "$f") || continue
  ns=$(readlink "/proc/$p/ns/uts" 2>/dev/null) || continue
  [[ $ns != "$(readlink /proc/$$/ns/uts)" ]] && node_ns+=("$ns")
done
for node in "${NODES[@]}"; do
  ns=$(stat -L -c 'net:[%i]' "/var/run/netns/dplab-$node" 2>/dev/null) && node_ns+=("$ns")
done

ctld=$(pid_in "$DIR/slurmctld.pid")
if [[ -n $ctld ]] && alive "$ctld"; then
  SLURM_CONF=$DIR/slurm.conf timeout 10 scancel --quiet --full --state=PENDING,RUNNING,SUSPENDED \
    $(SLURM_CONF=$DIR/slurm.conf timeout 10 squeue -h -o %i 2>/dev/null) 2>/dev/null
fi

stop_all() {  # TERM, wait up to 5 s, then KILL and wait again
  local pids=("$@") i
  (( ${#pids[@]} )) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  for i in $(seq 50); do alive "${pids[@]}" || return 0; sleep 0.1; done
  kill -KILL "${pids[@]}" 2>/dev/null
  for i in $(seq 50); do alive "${pids[@]}" || return 0; sleep 0.1; done
  return 1
}
ok=0
if (( ${#node_ns[@]} )); then
  mapfile -t pids < <(node_pids)
  stop_all "${pids[@]}" || ok=1
fi
for f in "$DIR"/slurmd-*.pid "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
  p=$(pid_in "$f") || continue
  [[ -n $p ]] && { stop_all "$p" || ok=1; }
  rm -f "$f"
done
# The network: each node's namespace (its end of the link goes with it), this host's end of
# each link, and the bridge. Only the names start.sh wrote in DIR/network.
for i in "${!NODES[@]}"; do
  ip netns del "dplab-${NODES[i]}" 2>/dev/null
  ip link del "dplab-n$((i + 1))" 2>/dev/null
  [[ -e /var/run/netns/dplab-${NODES[i]} ]] && { echo "stop.sh: namespace dplab-${NODES[i]} is still there" >&2; ok=1; }
done
if [[ -n $IFACE ]]; then
  ip link del "$IFACE" 2>/dev/null
  ip link show "$IFACE" >/dev/null 2>&1 && { echo "stop.sh: interface $IFACE is still there" >&2; ok=1; }
fi
if (( ok )); then
  echo "stop.sh: some processes of $DIR would not die" >&2
fi
exit $ok
