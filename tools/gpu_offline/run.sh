#!/usr/bin/env bash
# make test-gpu OFFLINE=1: every lab on a GPU machine with no network and no venv, on its python3's
# own torch (refused, before anything starts, outside the supported range: dplab/compat.py), with
# the other packages from the wheels of `make gpu-wheels` (WHL, default .whl/gpu, git-ignored).
# The settings run one after the other (python -m booktools.run --on gpu), within LIMIT s (480); each
# lab's verdict is printed as it ends and appended to $OUT/test_gpu.log, and all that this
# script prints to $OUT/run.log, so a run killed at its limit still reports what ran.
#   bash tools/gpu_offline/run.sh [labs/NN_lab.ipynb ...]
# PY (python3); SITE: where the wheels go (/tmp/site); OUT: logs (/tmp/gpu_out); SKIP_SMOKE=1;
# REHEARSE=1: the same steps on a CPU, gloo for both settings, on PY's own packages (no wheels):
#   REHEARSE=1 PY=.venv/bin/python PYTHONPATH=/tmp/tt/2.11.0 bash tools/gpu_offline/run.sh labs/00_meet_your_workers.ipynb
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export SITE=${SITE:-/tmp/site} OUT=${OUT:-/tmp/gpu_out} HOME=${HOME:-/root} WHL=${WHL:-.whl/gpu}
PY=${PY:-python3} LIMIT=${LIMIT:-480} REHEARSE=${REHEARSE:-}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$SECONDS
echo "== $(date -u +%FT%TZ) $(hostname) $(nproc) cores, user $(id -un), $(uname -r)${REHEARSE:+ (rehearsal on the CPU)}"
[ -n "$REHEARSE" ] || timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv \
    || echo "nvidia-smi failed"
# The torch it will run: in the supported range, or nothing starts.
TORCH=$(PYTHONPATH=${PYTHONPATH:-} timeout 120 "$PY" -c 'import sys, torch
print(torch.__version__); print(sys.version.split()[0], sys.executable, "cuda", torch.version.cuda,
      torch.cuda.is_available(), file=sys.stderr)') || { echo "no torch importable by $PY: nothing was started"; exit 3; }
CHECK='import importlib.util as u, sys; s = u.spec_from_file_location("compat", "dplab/compat.py")
m = u.module_from_spec(s); s.loader.exec_module(m); p = m.check_supported(sys.argv[1])
sys.exit(f"torch {sys.argv[1]} on this machine: {p}; nothing was started" if p else None)'
"$PY" -c "$CHECK" "$TORCH" || exit 3
echo "torch $TORCH: in the supported range"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -z "$REHEARSE" ]; then
    [ -d "$WHL" ] || { echo "no wheels in $WHL: run make gpu-wheels on a machine with network"; exit 3; }
    t0=$SECONDS
    timeout 180 "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl || { echo "pip install failed"; exit 3; }
    # pip --target drops the mpich wheel's data/lib (libmpi.so.12, its UCX and libfabric): copy it by hand
    rm -rf /tmp/mpich_whl && timeout 60 "$PY" -m zipfile -e "$WHL"/mpich-*.whl /tmp/mpich_whl \
        && cp -r /tmp/mpich_whl/mpich-*.data/data/lib "$SITE"/ && rm -rf /tmp/mpich_whl \
        || { echo "libmpi copy failed"; exit 3; }
    echo "installed $(ls "$WHL"/*.whl | wc -l) wheels in $((SECONDS - t0)) s"
    # The wheels first on sys.path (kernel, engines, guardian, torchrun workers inherit it); mpich's
    # mpiexec first on PATH; mpi4py loads mpich's libmpi; the "python3" kernel is ipykernel's own.
    export PYTHONPATH=$SITE:$PYTHONPATH PATH=$SITE/bin:$PATH LD_LIBRARY_PATH=$SITE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export MPI4PY_LIBMPI=$SITE/lib/libmpi.so.12 JUPYTER_PATH=$SITE/share/jupyter
else
    SITE=$(cd "$(dirname "$PY")/.." && pwd); export SITE PATH=$SITE/bin:$PATH  # rehearsal: PY's own packages
fi
export PYDEVD_DISABLE_FILE_VALIDATION=1 PYTHONUNBUFFERED=1
for v in $(compgen -e | grep '^DPLAB_'); do unset "$v"; done  # as the Makefile's UNSET_DPLAB
# dplab.cluster.torchrun runs <dir of sys.executable>/torchrun (Lab 5): make it if the image lacks it
TR=$("$PY" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "torchrun"))')
[ -x "$TR" ] || { printf '#!%s\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n' \
    "$("$PY" -c 'import sys; print(sys.executable)')" > "$TR" && chmod +x "$TR" && echo "made $TR"; }
MPI_TEST='from mpi4py import MPI; c = MPI.COMM_WORLD; assert c.size == 2, c.size; print("rank", c.rank, "of", c.size, MPI.Get_library_version().split(chr(10))[0])'
if ! timeout 30 mpiexec -n 2 "$PY" -c "$MPI_TEST"; then
    echo "mpiexec -n 2 failed: again with HYDRA_LAUNCHER=fork HYDRA_IFACE=lo (no ssh, no host-name lookup)"
    export HYDRA_LAUNCHER=fork HYDRA_IFACE=lo
    timeout 30 mpiexec -n 2 "$PY" -c "$MPI_TEST" || { echo "MPI does not work: no lab can run"; exit 4; }
fi
t0=$SECONDS
if [ -n "${SKIP_SMOKE:-}" ]; then smoke=0; else
    SMOKE_DEVICE=$([ -n "$REHEARSE" ] && echo cpu || echo cuda) timeout 150 "$PY" tools/gpu_offline/smoke.py 2>&1 \
        | tee "$OUT/smoke.log"; smoke=${PIPESTATUS[0]}
fi
echo "smoke: exit $smoke in $((SECONDS - t0)) s"
[ "$smoke" = 0 ] || { echo "the smoke test failed: the labs were not started (see above)"; exit 5; }
t0=$SECONDS
# The runner names, after the pass, any process of a lab still running (the condition gpu's tear-down).
timeout -k 10 $((LIMIT + 60)) "$PY" -m booktools.run --on gpu ${REHEARSE:+--rehearse} --timeout "$LIMIT" \
    --log "$OUT/test_gpu.log" "$@"
rc=$?
echo "booktools.run: exit $rc in $((SECONDS - t0)) s; the whole run $((SECONDS - T0)) s"
exit "$rc"
