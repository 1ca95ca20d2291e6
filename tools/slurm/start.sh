#!/usr/bin/env bash
# Start a private SLURM cluster of N nodes on this host (default 2, at most 4). Each node has
# its own network namespace, joined to this host by a veth pair on a private bridge: its own
# address (SUBNET.11, .12, ...), its own loopback, its own host name and /etc/hosts, and a
# slurmd bound to its address. This host is SUBNET.1 on the bridge; munged, slurmctld and the
# notebook side run here. The bridge and every node's end of its link are named IFACE, so
# that one DPLAB_IFACE fits the notebook side and every node. All state (config, spool,
# logs, munge key and socket) lives in DIR. Nothing here touches eth0 or its addresses.
#
#   tools/slurm/start.sh [DIR]      # default DIR: _build/slurm in this clone
#   source DIR/env.sh               # SLURM_CONF, DPSLURM_DIR, DPSLURM_IFACE, ...
#   tools/slurm/stop.sh [DIR]       # stops it all, whatever state it is in
#
# Settings (environment): DPSLURM_NODES (2), DPSLURM_SUBNET (10.77.0, a /24 this
# host does not use), DPSLURM_RATE (unset: links at full speed; for example 1gbit or
# 100mbit: every node's link shaped with tbf at that rate, in both directions). Ranks on one
# node talk over that node's loopback, which is never shaped: a network with two speeds.
#
# Needs root (namespaces, links, slurmd running jobs as any user) and the Debian packages
# slurm-wlm, munge and iproute2. It returns once sinfo shows every node idle; a start that
# fails removes whatever it made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
DIR=$(realpath -m "${1:-${DPSLURM_DIR:-$here/../../_build/slurm}}")
N=${DPSLURM_NODES:-2}
SUBNET=${DPSLURM_SUBNET:-10.77.0}
RATE=${DPSLURM_RATE:-}
IFACE=dplab0
CPUS=$(nproc)
HOST=$(hostname)

die() { echo "start.sh: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (network namespaces and links; slurmd runs jobs as their users)"
[[ $N =~ ^[1-4]$ ]] || die "DPSLURM_NODES=$N: give a node count from 1 to 4"
[[ $SUBNET =~ ^(10|172\.(1[6-9]|2[0-9]|3[01])|192\.168)(\.[0-9]{1,3}){1,2}$ && $(tr -cd . <<<"$SUBNET") == .. ]] \
  || die "DPSLURM_SUBNET=$SUBNET: give the first three numbers of a private /24, for example 10.77.0"
if [[ -n $RATE && ! $RATE =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]]; then
  die "DPSLURM_RATE=$RATE: give a tc rate such as 1gbit or 100mbit, or unset it"
fi
for exe in munged slurmctld slurmd sinfo unshare nsenter ip tc; do
  command -v "$exe" >/dev/null || die "$exe not found: apt-get install -y slurm-wlm munge iproute2"
done
if [[ -f $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
  die "a cluster already runs from $DIR: stop it first with tools/slurm/stop.sh $DIR"
fi
if ip link show "$IFACE" >/dev/null 2>&1; then
  die "this host already has an interface $IFACE: another private cluster runs (stop it with tools/slurm/stop.sh)"
fi
if ip -4 -o addr show | grep -q " inet $SUBNET\."; then
  die "this host already uses $SUBNET.0/24: set DPSLURM_SUBNET to a private /24 it does not use"
fi

NODES=()
for i in $(seq "$N"); do NODES+=("node$i"); done
rm -rf "$DIR"
mkdir -p "$DIR"/{log,ctld,tmp} "${NODES[@]/#/$DIR/spool/}"
mkdir -m 755 "$DIR/munge"  # its socket: for every user's sbatch and squeue (the key stays 400)
chmod 755 "$DIR"
# What stop.sh removes: written before anything is made, so that a failed start leaves nothing.
{
  echo "IFACE=$IFACE"
  echo "NODES=(${NODES[*]})"
} > "$DIR/network"
up=
trap '[[ -n $up ]] || { echo "start.sh: the cluster did not come up: stopping what was started (logs in $DIR/log)" >&2
      "$here/stop.sh" "$DIR" >/dev/null 2>&1; }' EXIT

# -- the network: a bridge on this host, one namespace and one veth pair per node -----------
shape() {  # shape DEV [NETNS]: tbf at RATE on DEV's egress
  [[ -n $RATE ]] || return 0
  local burst=256kb
  if [[ -n ${2:-} ]]; then
    nsenter --net="/var/run/netns/$2" tc qdisc add dev "$1" root tbf rate "$RATE" burst $burst latency 100ms
  else
    tc qdisc add dev "$1" root tbf rate "$RATE" burst $burst latency 100ms
  fi
}
ip link add "$IFACE" type bridge
ip addr add "$SUBNET.1/24" dev "$IFACE"
ip link set "$IFACE" up
for i in $(seq "$N"); do
  node=node$i ns=dplab-node$i veth=dplab-n$i
  ip netns add "$ns"
  ip link add "$veth" type veth peer name "$IFACE" netns "$ns"
  ip link set "$veth" master "$IFACE" up
  ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev "$IFACE"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$IFACE" up
  shape "$veth"            # towards the node
  shape "$IFACE" "$ns"     # from the node
done

free_port() {  # a port that is free on the bridge address now
  python3 -c "import socket; s = socket.socket(); s.bind(('$SUBNET.1', 0)); print(s.getsockname()[1])"
}
CTLD_PORT=$(free_port)
NODE_PORT=6818  # each node has its own address: the same port on each

# munge: its own key, socket, pid and log; --force because DIR is not its usual place.
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
  --seed-file="$DIR/munge/munged.seed"

# SLURM's epilog, run as root on each node once a job has ended there: what a centre's epilog
# does for /dev/shm and /tmp. Ranks that SLURM ends (scancel: SIGTERM, then SIGKILL after
# KillWait) do not reach MPI_Finalize, and leave MPICH's shared-memory files; Hydra's proxies
# ended so leave their topology file (hydra_hwloc_xmlfile_*, open while they live), and a
# notebook server's job ended so leaves its kernel's stack folder (/tmp/dplab-stacks-*). It
# removes those the job's user owns that no process holds, open or mapped (the nodes share this
# machine's processes, /dev/shm and /tmp: another job's live files are held, and stay).
cat > "$DIR/epilog.sh" <<'EPILOG'
#!/bin/sh
uid=${SLURM_JOB_UID:?}
held() {
  grep -qsE " $1( \(deleted\))?\$" /proc/[0-9]*/maps \
    || [ -n "$(find /proc/[0-9]*/fd -lname "$1" -print -quit 2>/dev/null)" ]
}
for f in /dev/shm/mpich_* /tmp/hydra_hwloc_xmlfile_*; do
  [ -f "$f" ] && [ "$(stat -c %u "$f")" = "$uid" ] || continue
  held "$f" || rm -f "$f"
done
# dplab's stack folders: the kernel that made one holds it open while its cluster lives and
# removes it at the stop; a job that SLURM ended took the kernel (a hub's server) with it.
for d in /tmp/dplab-stacks-*; do
  [ -d "$d" ] && [ "$(stat -c %u "$d")" = "$uid" ] || continue
  [ -n "$(find /proc/[0-9]*/fd \( -lname "$d" -o -lname "$d/*" \) -print -quit 2>/dev/null)" ] || rm -rf "$d"
done
exit 0
EPILOG
chmod 755 "$DIR/epilog.sh"

{
  cat <<CONF
# Written by tools/slurm/start.sh: a private $N-node cluster on the bridge $IFACE ($SUBNET.0/24).
ClusterName=dplab
SlurmctldHost=$HOST($SUBNET.1)
SlurmctldPort=$CTLD_PORT
# slurmd (and srun) bind the address their host name resolves to, not every address.
# slurmctld binds every address of this host: here the host's name resolves to 127.0.0.1,
# which the nodes cannot reach (NoCtldInAddrAny would leave it there).
CommunicationParameters=NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
TmpFS=$DIR/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=2
KillWait=2
Epilog=$DIR/epilog.sh
InactiveLimit=0
SlurmdTimeout=60
CONF
  for i in $(seq "$N"); do
    echo "NodeName=node$i NodeHostname=node$i NodeAddr=$SUBNET.$((10 + i)) Port=$NODE_PORT CPUs=$CPUS State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=60 State=UP"
} > "$DIR/slurm.conf"
cat > "$DIR/env.sh" <<ENV
export SLURM_CONF=$DIR/slurm.conf DPSLURM_DIR=$DIR DPSLURM_IFACE=$IFACE
export DPSLURM_NODE_NAMES="${NODES[*]}" DPSLURM_RATE=$RATE
# The nodes share one kernel, so UCX (MPICH's network module) would reach a rank on another
# node through shared memory, as if it were local. TCP only, as between separate machines;
# ranks on one node still use MPICH's own shared memory.
export UCX_TLS=tcp,self
ENV
# Every node's /etc/hosts: loopback, this host and the nodes on the bridge.
{
  echo "127.0.0.1 localhost"
  echo "$SUBNET.1 $HOST"
  for i in $(seq "$N"); do echo "$SUBNET.$((10 + i)) node$i"; done
} > "$DIR/hosts"

export SLURM_CONF=$DIR/slurm.conf
slurmctld -f "$SLURM_CONF"
for i in $(seq "$N"); do
  "$here/start_node.sh" "$DIR" "node$i"  # its namespaces, host name, /etc/hosts, /sys, slurmd
done

want="$(printf '%s idle ' "${NODES[@]}")"
deadline=$((SECONDS + 60))
until [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ') == "$want" ]]; do
  if (( SECONDS > deadline )); then
    sinfo -N >&2 || true
    tail -n 5 "$DIR"/log/*.log >&2 || true
    die "the nodes were not idle after 60 s (logs above)"
  fi
  sleep 0.2
done
up=1
echo "SLURM cluster up in $DIR: nodes ${NODES[*]} idle on $IFACE ($SUBNET.0/24${RATE:+, links shaped to $RATE}), $CPUS CPUs each; source $DIR/env.sh"
