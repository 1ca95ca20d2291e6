"""The tests' helpers, the one place they live (installed with the kit as `tests.support`; no
test module imports another, and none edits sys.path):

- processes: what a test started, a cluster's or a notebook's processes, waiting for them to end
- mpi: the scripts of tests/mpi under mpiexec, and the lines their ranks print
- kernels: learners as real ipykernels, and what is left of a cluster after its kernel died
- recipes: the launch recipes of launch/ and the line each rank prints
- sockets: the sockets processes listen on, in their own network namespaces
- slurm: the private SLURM cluster (tools/slurm): whether it answers, its jobs and nodes, sbatch
- browser: Debian's headless Chromium, and a folder served on loopback
- hub, slurm_hub, jupyterlab: a test JupyterHub, its SLURM variant, a learner in JupyterLab
- grading: learners' notebooks for the grading tests (handed out, solved, with a mistake)

The page model and the numbers in prose are booktools' (booktools.pages, booktools.numbers).
"""
