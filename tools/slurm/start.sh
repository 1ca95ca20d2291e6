#!/usr/bin/env bash
# Start a private SLURM cluster of 2 nodes on this host: munged, slurmctld, and one slurmd
# per node, each node in its own UTS and mount namespace (its own host name, and an
# /etc/hosts that maps node1 and node2 to 127.0.0.1). Everything listens on 127.0.0.1, on
# free ports; all state (config, spool, logs, munge key and socket) lives in DIR.
#
#   tools/slurm/start.sh [DIR]      # default DIR: _build/slurm in this clone
#   source DIR/env.sh               # SLURM_CONF for sinfo, sbatch, srun, squeue, scancel
#   tools/slurm/stop.sh [DIR]       # stops it all, whatever state it is in
#
# Needs root (slurmd runs jobs as any user; unshare and mount need CAP_SYS_ADMIN) and the
# Debian packages slurm-wlm and munge. It returns once sinfo shows both nodes idle.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
DIR=$(realpath -m "${1:-${DPLAB_SLURM_DIR:-$here/../../_build/slurm}}")
NODES=(node1 node2)
CPUS=$(nproc)

die() { echo "start.sh: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (slurmd runs jobs as their users; unshare needs CAP_SYS_ADMIN)"
for exe in munged slurmctld slurmd sinfo unshare; do
  command -v "$exe" >/dev/null || die "$exe not found: apt-get install -y slurm-wlm munge"
done
if [[ -f $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
  die "a cluster already runs from $DIR: stop it first with tools/slurm/stop.sh $DIR"
fi

rm -rf "$DIR"
mkdir -p "$DIR"/{log,ctld,spool/node1,spool/node2,tmp}
mkdir -m 700 "$DIR/munge"
chmod 755 "$DIR"
# Stop whatever started if we do not get to the end.
trap '"$here/stop.sh" "$DIR" >/dev/null 2>&1 || true' ERR

free_ports() {  # N distinct ports that are free on 127.0.0.1 now
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
read -r CTLD_PORT PORT1 PORT2 <<<"$(free_ports 3)"

# munge: its own key, socket, pid and log; --force because DIR is not its usual place.
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
  --seed-file="$DIR/munge/munged.seed"

cat > "$DIR/slurm.conf" <<CONF
# Written by tools/slurm/start.sh: a private 2-node cluster on 127.0.0.1.
ClusterName=dplab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
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
InactiveLimit=0
SlurmdTimeout=60
NodeName=node1 NodeHostname=node1 NodeAddr=127.0.0.1 Port=$PORT1 CPUs=$CPUS State=UNKNOWN
NodeName=node2 NodeHostname=node2 NodeAddr=127.0.0.1 Port=$PORT2 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=60 State=UP
CONF
cat > "$DIR/env.sh" <<ENV
export SLURM_CONF=$DIR/slurm.conf DPLAB_SLURM_DIR=$DIR
ENV
# What every node's processes see as /etc/hosts: this host's, plus the two node names.
{ cat /etc/hosts; echo "127.0.0.1 ${NODES[*]}  # tools/slurm/start.sh"; } > "$DIR/hosts"

export SLURM_CONF=$DIR/slurm.conf
slurmctld -f "$SLURM_CONF"
for node in "${NODES[@]}"; do
  # A node: its own host name and /etc/hosts; slurmd forks into the background in there,
  # and every job step it starts inherits both.
  unshare --uts --mount --propagation private sh -c \
    "mount --bind '$DIR/hosts' /etc/hosts && hostname $node && exec slurmd -f '$SLURM_CONF' -N $node"
done

deadline=$((SECONDS + 60))
until [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ') == "node1 idle node2 idle " ]]; do
  if (( SECONDS > deadline )); then
    sinfo -N >&2 || true
    tail -n 5 "$DIR"/log/*.log >&2 || true
    die "the nodes were not idle after 60 s (logs above)"
  fi
  sleep 0.2
done
trap - ERR
echo "SLURM cluster up in $DIR: nodes node1 node2 idle, $CPUS CPUs each; source $DIR/env.sh"
