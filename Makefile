# Two commands on a fresh machine: `make book` and `make test`. Both set everything up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
# MathJax from npm, served from the book's own _static (_ext/local_mathjax.py): no CDN.
MATHJAX_VERSION := 3.2.2
MATHJAX := $(VENV)/share/mathjax/.installed-$(MATHJAX_VERSION)
# nbgrader (requirements-teach.txt), for instructor mode and its tests. Defined before any rule
# names it: make expands a rule's prerequisites where it reads the rule.
TEACH := $(VENV)/.teach-installed
# ipyparallel finds mpiexec (from the mpich wheel) on PATH.
export PATH := $(BIN):$(PATH)
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup venv book test hub-install test-kit test-labs test-labs-other-cpu test-book test-browser test-any-p test-gpu test-torch test-torch-all test-slurm \
	test-hub test-hub-slurm test-load student grade grade-class test-student test-nbgrader bench bench-nodes bench-big labs jupyter clean \
	torch-releases

setup: $(STAMP) $(MATHJAX)

# Only the Python venv: what the targets that build no page need (no npm on a GPU node).
venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

$(MATHJAX): | $(STAMP)
	@command -v npm >/dev/null || { echo "npm not found: install Node.js and npm (Debian: apt-get install npm)," \
		"which the book needs to bundle MathJax"; exit 1; }
	rm -rf $(VENV)/share/mathjax
	npm install --prefix $(VENV)/share/mathjax --no-save --no-package-lock --no-audit --no-fund \
		--loglevel=error mathjax@$(MATHJAX_VERSION)
	touch $@

book: setup
	$(BIN)/jupyter-book build .
	@echo "Open _build/html/index.html"

# make test's pass over the labs is test-labs', with its ON= (default: the nbval pass on the
# reference torch). .ci/run gives it ON=torch=NEWEST,other-cpu,two=3@LOWEST: one execution of the
# labs proves the stored outputs on another CPU and torch beside a second learner on the lowest.
# The book's strict build and its pages in Chromium (test-book, test-browser) run beside the kit's
# tests, which leave about one core idle (python -m booktools.beside: at nice 19, so the tests'
# bounded waits keep the cores, and under a tether, so nothing outlives make); their printout goes
# to _build/book-beside.log, shown if they fail. Then the labs.
BOOK_LOG := _build/book-beside.log
test: setup
	@$(BIN)/python -m booktools.beside $(BOOK_LOG) -- $(MAKE) --no-print-directory test-book test-browser \
		-- $(MAKE) --no-print-directory test-kit
	@$(MAKE) --no-print-directory test-labs

# Labs and kit tests run with the defaults (4 engines, automatic backend), whatever the shell sets:
# every DPLAB_* variable in make's environment is removed (no list of settings to keep up to date).
UNSET_DPLAB := env $(foreach v,$(filter DPLAB_%,$(.VARIABLES)),-u $(v))

test-kit: setup
	$(UNSET_DPLAB) $(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/browser --ignore=tests/hub --ignore=tests/hub_slurm \
		--ignore=tests/student --ignore=tests/nbgrader tests

# The labs under conditions (python -m booktools.run): one pass per word of ON, each a comma-joined
# set of conditions (booktools/conditions.py): make test-labs ON=p=3,busy, ON="p=1 p=3". By default
# the nbval pass: every lab, every stored output compared (tests/nbval_sanitize.cfg masks the floats
# that depend on summation order), on the CPU whatever the machine has (the stored outputs are the
# CPU's: make test-gpu checks the GPU). A pass whose conditions change the outputs runs every lab,
# asserts only. LABS=02,06 or LABS=timing picks labs; TIMEOUT= bounds each pass (s); LOG= gets
# every line as it comes, RECORD= each pass's verdict. ON=gpu,offline needs no venv (run.sh).
ON ?=
LABS ?=
GPU_OFFLINE := $(findstring offline,$(ON))
test-labs: $(if $(GPU_OFFLINE),,venv)
	$(if $(GPU_OFFLINE),LIMIT=$(or $(TIMEOUT),$(GPU_LIMIT)) WHL=$(GPU_WHEELS) bash tools/gpu_offline/run.sh,$(UNSET_DPLAB) \
		$(BIN)/python -m booktools.run --on "$(or $(ON),quiet)" $(if $(LABS),--labs $(LABS)) \
		$(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(LOG),--log $(LOG)) $(if $(RECORD),--record $(RECORD)))

# The old targets, each a make test-labs ON=...:
# the stored outputs on the simulated other CPU, beside one core kept busy (a neighbour on a shared node);
test-labs-other-cpu:
	$(MAKE) --no-print-directory test-labs ON=other-cpu,busy

# every lab at p = 1 and p = 3, asserts only (ANY_P="1 2" picks others; .ci/run runs neither: make
# test-nbgrader runs every cell at p = 1, and the second learner of .ci/run's make test ON=... p = 3);
ANY_P ?= 1 3
test-any-p:
	$(MAKE) --no-print-directory test-labs ON="$(foreach q,$(ANY_P),p=$(q))"

# every lab that times anything under the load of a shared machine: 3 quiet runs in a row, a busy
# core, two learners at once, p = 2 and p = 6; LOAD="two busy" picks some (quiet1 still means quiet);
LOAD ?= quiet quiet quiet busy two p=2 p=6
test-load:
	$(MAKE) --no-print-directory test-labs ON="$(patsubst quiet%,quiet,$(LOAD))" LABS=timing

# the nbval pass on another release of torch (installed once into .torch/X.Y.Z/, refused before
# that outside the supported range): ON=other-cpu as test-labs-other-cpu, ON=two-learners beside a
# second learner at p = 3 (make test-any-p's p = 3); RECORD=1 puts the verdict in
# benchmarks/results/test_torch.txt, which the intro page shows;
TORCH ?=
TORCH_ON := this-cpu other-cpu two-learners
TORCH_ON_NAME = $(or $(ON),this-cpu)
TORCH_ON_this-cpu :=
TORCH_ON_other-cpu := ,other-cpu,busy
TORCH_ON_two-learners := ,two=3
test-torch:
	@[ -n "$(TORCH)" ] || { echo "make test-torch: name a release, make test-torch TORCH=2.8.0" >&2; exit 2; }
	@[ -n "$(filter $(TORCH_ON_NAME),$(TORCH_ON))" ] && [ "$(words $(TORCH_ON_NAME))" = 1 ] || { echo \
		"make test-torch: ON=$(ON)? Use one of ON=$(subst $() , ON=,$(TORCH_ON))" >&2; exit 2; }
	$(MAKE) --no-print-directory test-labs ON=torch=$(TORCH)$(TORCH_ON_$(TORCH_ON_NAME)) \
		LOG=_build/test-torch-$(TORCH)-$(TORCH_ON_NAME).log $(if $(RECORD),RECORD=benchmarks/results/test_torch.txt)

# Releases of torch installed beside the venv, two at a time, before the targets that use them
# (.ci/run: its three releases, which take little more than one): TORCH=2.8.0,2.15.0.
comma := ,
torch-releases: venv
	@[ -n "$(TORCH)" ] || { echo "make torch-releases: name them, make torch-releases TORCH=2.8.0,2.15.0" >&2; exit 2; }
	$(BIN)/python -m booktools.releases --install $(subst $(comma), ,$(TORCH))

# The whole supported range: the nbval pass on the newest patch of every minor release
# (booktools.releases.NEWEST_PATCH), each installed once into .torch/ and kept; every verdict goes
# to benchmarks/results/test_torch.txt. Fails if any release fails, after running them all.
test-torch-all: venv
	$(MAKE) --no-print-directory test-labs ON="$$($(BIN)/python -m booktools.releases --all | sed 's/[^ ]*/torch=&/g')" \
		LOG=_build/test-torch-all.log RECORD=benchmarks/results/test_torch.txt

# every lab on a GPU, asserts only: NCCL with one engine per GPU, then 4 engines sharing GPU 0 on
# gloo, within GPU_LIMIT s, each verdict in _build/test_gpu.log as it comes; refused with no GPU.
# OFFLINE=1: a GPU machine with no network and no venv (tools/gpu_offline/run.sh, on the machine's
# own torch and the wheels of make gpu-wheels).
GPU_LIMIT ?= 480
GPU_WHEELS ?= .whl/gpu
GPU_ON := gpu
ifeq ($(OFFLINE),1)
GPU_ON := gpu,offline
endif
test-gpu:
	$(MAKE) --no-print-directory test-labs ON=$(GPU_ON) TIMEOUT=$(GPU_LIMIT) LOG=_build/test_gpu.log

# The wheels that test-gpu OFFLINE=1 installs, for the GPU machine's Python (GPU_PYTHON), made here
# (network needed): requirements.txt less torch, the book's tools and what the GPU image has.
GPU_PYTHON ?= 3.12
GPU_PLATFORMS := $(foreach t,manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
	manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux1,--platform $(t)_x86_64)
gpu-wheels: venv
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(BIN)/python tools/gpu_offline/wheels.py > $(GPU_WHEELS)/requirements.txt
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
		--implementation cp $(GPU_PLATFORMS) -d $(GPU_WHEELS) -r $(GPU_WHEELS)/requirements.txt
	@du -sh $(GPU_WHEELS)

# A private SLURM cluster of 2 nodes on this machine (tools/slurm/start.sh), the tests in
# tests/slurm on it (the SLURM launch recipes, engines across nodes, Lab 0 on them), then its
# stop, whatever happens. Needs root; installs Debian's slurm-wlm and munge when missing.
test-slurm: setup $(TEACH)
	tools/slurm/run_tests.sh $(BIN)/python tests/slurm

# An HPC centre's JupyterHub on the private 2-node SLURM cluster: hub/jupyterhub_slurm_config.py
# (batchspawner) submits a real Unix learner's server as a SLURM job; Lab 0 runs in JupyterLab in
# headless Chromium on 1 node and on 2, then the idle culler, a killed kernel and bad requests.
# Needs root; installs what make test-hub and make test-slurm install.
test-hub-slurm: hub-install
	tools/slurm/run_tests.sh $(BIN)/python tests/hub_slurm

# A real JupyterHub (127.0.0.1) loading the sample hub/jupyterhub_config.py, and Lab 0 run in
# JupyterLab in headless Chromium through it, with the engine count from the spawner's environment.
# Installs requirements-hub.txt, configurable-http-proxy (npm) and Debian's chromium when missing.
test-hub: hub-install
	$(UNSET_DPLAB) $(BIN)/python -m pytest -q -p no:cacheprovider -rs tests/hub

# What make test-hub and make test-hub-slurm need (tools/hub/install.sh: each step skipped when
# done): requirements-hub.txt into the venv, configurable-http-proxy from npm, Debian's chromium.
hub-install: setup
	tools/hub/install.sh $(BIN)/python

# Instructor mode (README, "Teaching with the book"). nbgrader, for make student, in the same venv.
$(TEACH): requirements-teach.txt $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-teach.txt
	touch $@

# The learners' notebooks in _build/student/labs/: each solution region a stub, outputs cleared.
student: $(TEACH)
	$(BIN)/python -m teach.student

# Grade one learner's notebook: make grade NB=path/to/02_data_parallel_by_hand.ipynb (the
# DPLAB_* settings of the shell apply, e.g. DPLAB_ENGINES=2); a score per check.
grade: venv
	@[ -n "$(NB)" ] || { echo "make grade: name the learner's notebook, make grade NB=path/to/NN_lab.ipynb" >&2; exit 2; }
	$(BIN)/python -m teach.grade "$(NB)"

# Grade a class: make grade-class DIR=submitted (one folder per learner, named by their id).
# Each notebook a bounded run with its own cluster, as a SLURM job where a controller answers
# (SLURM_CONF), else one after another here; learners' code runs as an unprivileged account
# that cannot see DIR or labs/ (needs root). grades.csv as nbgrader export writes it, and a
# report per learner, in DIR/_grades (python -m teach.grade_class; ENGINES=2 by default).
grade-class: venv
	@[ -n "$(DIR)" ] || { echo "make grade-class: name the class's folder, make grade-class DIR=path/to/submitted" >&2; exit 2; }
	$(UNSET_DPLAB) $(BIN)/python -m teach.grade_class "$(DIR)" --engines $(or $(ENGINES),2)

# What only our own grader (make grade) does, and make student's handout (tests/student): the
# handout is each lab without its solutions; the grader's report of Lab 2's stubs and of a
# plausible mistake; a rank that raises, dies or hangs, a dead kernel, a grader killed with
# SIGKILL, bad input; the sandbox (as root); each solution cell alone scores exactly its checks,
# for one lab and as many of its cells as fit 120 s, fixed by the tree (INDEPENDENT_LABS=all or
# =02,06 chooses labs, every cell). Every lab's scores are make test-nbgrader's. SANDBOX=no leaves
# out the sandbox's tests (tests/student/test_sandbox.py), SANDBOX=only runs just them: .ci/run runs
# the rest beside make test-slurm (each checks only the processes it marked), and the sandbox's
# after it, beside make test-hub-slurm (they count every sandboxed process and remove the
# sandbox's account, which make test-slurm's grade-class uses; the SLURM hub sandboxes nothing).
STUDENT_TESTS = $(if $(filter only,$(SANDBOX)),tests/student/test_sandbox.py,tests/student \
	$(if $(filter no,$(SANDBOX)),--ignore=tests/student/test_sandbox.py))
test-student: $(TEACH)
	$(UNSET_DPLAB) $(BIN)/python -m pytest -q -p no:cacheprovider $(STUDENT_TESTS)

# The one suite that scores every lab: nbgrader's own generate_assignment, autograde and export on
# a course made from the labs (python -m teach.course): every lab's release is make student's,
# scores 0 as handed out and full marks with its solutions, every cell run at p = 1; each plausible
# mistake loses exactly its checks' points. NBGRADER_LABS=02,03 picks labs (tests/nbgrader);
# TORCH=X.Y.Z grades on that release of torch, installed once as make test-torch installs it
# (.ci/run: the middle release the tree picks, python -m booktools.releases --middle). About 7 min.
test-nbgrader: $(TEACH)
	$(if $(TORCH),$(BIN)/python -m booktools.releases --install $(TORCH))
	$(UNSET_DPLAB) NBGRADER_LABS="$(or $(NBGRADER_LABS),all)" NBGRADER_TORCH="$(TORCH)" \
		$(BIN)/python -m pytest -q -s -p no:cacheprovider tests/nbgrader

# The labs were just executed by nbval; the book build re-runs only the chapters' cells.
test-book: setup
	mkdir -p _build
	$(BIN)/python -m booktools.bookconfig _config.yml _build/_config_test.yml
	$(BIN)/jupyter-book build -W -n --keep-going --config _build/_config_test.yml .

# Every page of _build/html in headless Chromium at 1280 x 800 (tests/browser): math rendered by
# the local MathJax, images and internal links that resolve, no console errors, code within its
# column, no request leaving the local server. Screenshots in _build/screenshots/.
# Installs Debian's chromium when /usr/bin/chromium is missing (needs root and apt-get). About 1 min.
test-browser: setup
	tools/ensure_chromium.sh
	timeout -k 10 300 $(BIN)/python -m pytest -q -p no:cacheprovider -o faulthandler_timeout=120 tests/browser

# Run the labs yourself: the venv, JupyterLab with jupyterlab-myst (requirements-hub.txt, which
# changes no pin of requirements.txt), then JupyterLab on labs/. The DPLAB_* settings of the shell
# apply (DPLAB_ENGINES=2 make jupyter).
JUPYTER := $(VENV)/.jupyter-installed
$(JUPYTER): requirements-hub.txt $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-hub.txt
	touch $@

jupyter: $(JUPYTER)
	$(BIN)/jupyter lab labs

# Re-execute every lab, store its outputs, and export what the labs teach to labcode/.
labs: setup
	$(UNSET_DPLAB) $(BIN)/python -m booktools.store labs/*.ipynb
	$(BIN)/python -m booktools.export

bench: setup
	$(BIN)/python benchmarks/run_all.py

# Flat ring vs hierarchical all-reduce on the private 2-node cluster with its links shaped to
# DPSLURM_RATE (default 1gbit): benchmarks/results/topology.{txt,json}, which the all-reduce
# chapter shows. Needs root; installs Debian's slurm-wlm, munge and iproute2 when missing.
bench-nodes: setup
	@[ "$$(id -u)" = 0 ] || { echo "make bench-nodes: needs root (network namespaces, shaped links, SLURM daemons)" >&2; exit 2; }
	tools/slurm/install.sh "make bench-nodes"
	$(BIN)/python benchmarks/topology.py $(if $(DPSLURM_RATE),--rate $(DPSLURM_RATE))

# What the 2-core box cannot show, on a machine with more cores (and a GPU, if any), within
# 290 s (every job bounded): data-parallel speed-up from p = 1 to MAX_RANKS (default min(8,
# cores), one core per rank) at a fixed global batch; DDP's overlap where compute and
# all-reduce take as long; as root with SLURM installed (make bench-nodes installs it),
# hierarchical vs flat all-reduce. Saves benchmarks/results/big_KIND.{json,txt} (KIND: cores, CPU, GPU) and redraws
# img/bench_big/. SIZE=rehearsal: a small run, about a minute on 2 cores. Not in make test.
SIZE ?= full
MAX_RANKS ?=
bench-big: venv
	$(UNSET_DPLAB) $(BIN)/python benchmarks/big/bench_big.py --size $(SIZE) $(if $(MAX_RANKS),--max-ranks $(MAX_RANKS))

clean:
	rm -rf _build .pytest_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
