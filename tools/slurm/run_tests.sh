#!/usr/bin/env bash
# make test-slurm and make test-hub-slurm: install SLURM and munge if missing (Debian's
# slurm-wlm, needs root), start the private 2-node cluster, run the tests in TESTS on it
# (tests/slurm, tests/hub_slurm), and stop it whatever happens.
#   tools/slurm/run_tests.sh PYTHON TESTS [pytest arguments]
set -uo pipefail
cd "$(dirname "$0")/../.."
usage="usage: tools/slurm/run_tests.sh PYTHON TESTS [pytest arguments]"
python=${1:?$usage}; tests=${2:?$usage}; shift 2
who="make test-${tests##*/}"; who=${who//_/-}
dir=$PWD/_build/slurm

if [[ $(id -u) != 0 ]]; then
  echo "$who: needs root. It installs the Debian packages slurm-wlm and munge if they" \
       "are missing, makes a network namespace, a link and a bridge per node, and runs slurmctld and" \
       "two slurmd (which start jobs as any user) in them. Run it as root (for example in a disposable container or VM)." >&2
  exit 2
fi
tools/slurm/install.sh "$who" || exit 2

trap 'tools/slurm/stop.sh "$dir"' EXIT  # on success, failure or Ctrl-C
tools/slurm/start.sh "$dir" || exit 1
source "$dir/env.sh"
# The tests start from the kit's defaults: every DPLAB_* setting of this shell is removed (env.sh's
# DPSLURM_*, which tell the tests where the private cluster is, have a prefix of their own).
unset_dplab=()
for v in $(compgen -e | grep '^DPLAB_'); do unset_dplab+=(-u "$v"); done
env "${unset_dplab[@]}" PYTHONPATH="$PWD" \
  "$python" -m pytest -q -p no:cacheprovider -rs "$tests" "$@"
status=$?

# Stop it, and fail if anything of it is left: daemons, jobs' processes, namespaces, links
# (their qdiscs go with them), the bridge.
trap - EXIT
tools/slurm/stop.sh "$dir" || status=1
left=$(
  ip netns list | grep -o '^dplab-node[0-9]*'
  ip -br link | grep -o '^dplab[-a-z0-9]*'
  pgrep -af "$dir/" | grep -v pgrep
)
if [[ -n $left ]]; then
  echo "$who: left behind after the stop:" $left >&2
  status=1
fi
exit $status
