#!/usr/bin/env bash
# make test-gpu's work (tools/run_labs.py --gpu --parallel) on a GPU machine with no network and no
# venv, whose python3 already has a CUDA torch: the packages it lacks come as wheels in WHL
# (default .whl, git-ignored), fetched beforehand on a machine with network, for the GPU
# machine's Python and of the versions in requirements.txt (not torch), e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl ipyparallel==9.2.0 ...
# (ipyparallel, ipykernel, jupyter-client, nbclient, nbformat, mpi4py, mpich, mlxtend and their
# dependencies). From the repo root: bash tools/gpu_offline/run.sh [labs/NN_lab.ipynb ...]
# SITE: where the wheels go (default /tmp/site); OUT: logs; SKIP_SMOKE=1; RUN_TIMEOUT (s, 400).
# benchmarks/results/test_gpu_h200.txt is what it printed on one H200.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export SITE=${SITE:-/tmp/site} OUT=${OUT:-/tmp/gpu_out} HOME=${HOME:-/root} WHL=${WHL:-.whl}
mkdir -p "$OUT"
echo "== $(date -u +%FT%TZ) $(hostname) ($(getent hosts "$(hostname)" | head -1)) $(nproc) cores, user $(id -un), $(uname -r)"
timeout 30 nvidia-smi || echo "nvidia-smi failed"
timeout 60 python3 -c 'import sys, torch; print(sys.version, sys.executable, "torch", torch.__version__,
    torch.version.cuda, torch.cuda.is_available())'
df -h /dev/shm /tmp 2>&1; echo "ulimit -n $(ulimit -n) -u $(ulimit -u)"
which -a mpiexec python3 2>/dev/null; ls "$(dirname "$(command -v python3)")" | grep -iE '^(mpi|torchrun)' | tr '\n' ' '; echo
t0=$SECONDS
timeout 180 python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl || { echo "pip install failed"; exit 3; }
# pip --target drops the mpich wheel's data/lib (libmpi.so.12, its UCX and libfabric): copy it by hand
rm -rf /tmp/mpich_whl && timeout 60 python3 -m zipfile -e "$WHL"/mpich-*.whl /tmp/mpich_whl \
    && cp -r /tmp/mpich_whl/mpich-*.data/data/lib "$SITE"/ && rm -rf /tmp/mpich_whl || { echo "libmpi copy failed"; exit 3; }
echo "installed in $((SECONDS - t0)) s"
# The wheels first on sys.path (kernel, engines, guardian, torchrun workers inherit it); mpich's
# mpiexec first on PATH; mpi4py loads mpich's libmpi; the "python3" kernel is ipykernel's own.
export PYTHONPATH=$SITE:$PWD PATH=$SITE/bin:$PATH LD_LIBRARY_PATH=$SITE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MPI4PY_LIBMPI=$SITE/lib/libmpi.so.12 JUPYTER_PATH=$SITE/share/jupyter
export PYDEVD_DISABLE_FILE_VALIDATION=1 PYTHONUNBUFFERED=1
for v in $(compgen -e | grep '^DPLAB_'); do unset "$v"; done  # as the Makefile's UNSET_DPLAB
# dplab.cluster.torchrun runs <dir of sys.executable>/torchrun (Lab 5): make it if the image lacks it
TR=$(python3 -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "torchrun"))')
[ -x "$TR" ] || { printf '#!%s\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n' \
    "$(python3 -c 'import sys; print(sys.executable)')" > "$TR" && chmod +x "$TR" && echo "made $TR"; }
MPI_TEST='from mpi4py import MPI; c = MPI.COMM_WORLD; assert c.size == 2, c.size; print("rank", c.rank, "of", c.size, MPI.Get_library_version().split(chr(10))[0])'
if ! timeout 30 mpiexec -n 2 python3 -c "$MPI_TEST"; then
    echo "mpiexec -n 2 failed: again with HYDRA_LAUNCHER=fork HYDRA_IFACE=lo (no ssh, no host-name lookup)"
    export HYDRA_LAUNCHER=fork HYDRA_IFACE=lo
    timeout 30 mpiexec -n 2 python3 -c "$MPI_TEST" || { echo "MPI does not work: no lab can run"; exit 4; }
fi
t0=$SECONDS
if [ -n "${SKIP_SMOKE:-}" ]; then smoke=0; else timeout 150 python3 tools/gpu_offline/smoke.py 2>&1 | tee "$OUT/smoke.log"; smoke=${PIPESTATUS[0]}; fi
echo "smoke: exit $smoke in $((SECONDS - t0)) s"
[ "$smoke" = 0 ] || { echo "the smoke test failed: the labs were not started (see above)"; exit 5; }
t0=$SECONDS
timeout -k 10 $((${RUN_TIMEOUT:-400} + 40)) python3 tools/run_labs.py --gpu --parallel --timeout ${RUN_TIMEOUT:-400} "$@" 2>&1 | tee "$OUT/test_gpu.log"
rc=${PIPESTATUS[0]}
echo "run_labs: exit $rc in $((SECONDS - t0)) s"
ps -eo pid,etimes,args | grep -E 'ipyparallel|mpiexec|hydra_pmi|ipykernel|torchrun' | grep -v grep | head -20
exit "$rc"
