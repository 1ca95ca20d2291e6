"""`make bench-big`: the effects a 2-core box cannot show, measured on a larger machine.

Three parts, each built from code the book already runs, in one command bounded by --limit
seconds (290 at the full size; not yet run on a machine with 16 cores):

  scaling  strong scaling: one SGD step of Lab 4's wide MLP (`labcode.overlap.make_step`)
           on a fixed global batch split over p = 1, 2, 4, ... up to --max-ranks ranks, one
           core (torch thread) each, with no communication ("compute only"), one all-reduce
           after backward ("no overlap") and DDP; samples/s and the speed-up over p = 1.
           With a GPU, the same step at p = 1 on it, for scale.
  overlap  `benchmarks/ddp.py` (all-reduce after backward, Lab 4's hooks and DDP, several
           bucket caps) at p ranks with a core to spare for each rank's communication, at
           the per-rank batch where, in the scaling part, compute and all-reduce took about
           the same time (`balanced_batch`).
  nodes    `benchmarks/topology.py` (flat ring vs hierarchical all-reduce on the private
           2-node cluster, links shaped to 1 gbit/s): as root with SLURM installed (as
           `make bench-nodes` installs it), else skipped and said so; its files are kept
           apart from make bench-nodes' own.

Every job is an `mpiexec` of this script or of ddp.py (`dplab.cluster.jobs.run_job`), killed
with all its processes at its time bound; Ctrl-C or SIGTERM ends every process it started.
It saves benchmarks/results/big_KIND.json and .txt, KIND naming the cores, CPU and GPU
(`big_results.result_paths`; torch's release is in the header); a file that holds another
machine's results is never overwritten. Then it redraws img/bench_big/ from the 2-core
machine's results and the largest machine's.

    make bench-big                                   # the full size, p up to min(8, cores)
    make bench-big SIZE=rehearsal MAX_RANKS=2        # a rehearsal: small, about a minute
    .venv/bin/python benchmarks/big/bench_big.py --help

Where no venv can be made (a GPU machine without network), any Python with the book's
packages, the repository on its path, runs the script itself. Under mpiexec (as the command starts it) it is one rank of the scaling part.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
from benchmarks.big import big_results as br  # noqa: E402  (installed with the kit)

#: Per size: the global batch of the scaling part, timed steps and untimed ones per
#: configuration, repeats of the nodes part, and the whole run's bound in seconds.
SIZES = {
    "full": dict(global_batch=512, repeats=10, warmup=2, node_repeats=5, limit=290),
    "rehearsal": dict(global_batch=64, repeats=3, warmup=1, node_repeats=3, limit=170),
}
MAX_P = 8
CAP_MB = 25                      # DDP's default bucket cap
BATCH_RANGE = (8, 256)           # the overlap part's per-rank batch stays within these
#: The most seconds one job of each part may take (less when the run's bound is nearer).
JOB_S = {"scaling": 90, "gpu": 120, "overlap": 150, "nodes": 240}
NODE_TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "ip", "tc")
NODES_DIR = ROOT / "_build" / "slurm-topology"   # where topology.py starts its cluster


# -- the machine and the options -----------------------------------------------------

def usable_cores() -> int:
    """The cores this process may run on (its affinity), which may be fewer than the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (dplab.timing's), its runs of spaces made one."""
    from dplab.timing import cpu_model

    return re.sub(r"\s+", " ", cpu_model())


def machine_info(cores: int, gpu: str | None) -> dict:
    """What names the machine in the result: cores used, CPU, GPU, torch, Python, OS."""
    import psutil
    import torch

    return {"cores": cores, "physical_cores": psutil.cpu_count(logical=False), "cpu": cpu_model(),
            "gpu": gpu, "torch": torch.__version__, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}"}


def gpu_name() -> str | None:
    """The first visible GPU's name, or None."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def can_run_nodes() -> str | None:
    """Why the nodes part cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, shaped links, SLURM daemons)"
    missing = [t for t in NODE_TOOLS if shutil.which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not found: run make bench-nodes once as root "
                "(it installs slurm-wlm, munge and iproute2)")
    return None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="full",
                    help="full (default) or rehearsal (small batch, few repeats)")
    ap.add_argument("--max-ranks", type=int, default=None,
                    help=f"largest p (default: min({MAX_P}, usable cores)); at most the cores")
    ap.add_argument("--nodes", choices=("auto", "yes", "no"), default="auto",
                    help="the hierarchical all-reduce part: auto runs it when root with SLURM")
    ap.add_argument("--no-gpu", action="store_true", help="skip the one-GPU step")
    ap.add_argument("--limit", type=float, default=None,
                    help="seconds for the whole run (default: the size's, 290 at full)")
    ap.add_argument("--out", type=Path, default=br.RESULTS, help="folder for the result files")
    ap.add_argument("--topology-into", type=Path, help=argparse.SUPPRESS)  # the nodes part's child
    ap.add_argument("--repeats", type=int, default=None, help=argparse.SUPPRESS)
    return ap


def check(args: argparse.Namespace, cores: int, nodes_problem: str | None) -> str | None:
    """What is wrong with the options on a machine with `cores` usable cores, or None; fills in
    the defaults of --max-ranks and --limit."""
    if cores < 2:
        return f"this process may use {cores} core: make bench-big needs at least 2, one per rank"
    if args.max_ranks is None:
        args.max_ranks = min(MAX_P, cores)
    if args.max_ranks < 2:
        return f"--max-ranks {args.max_ranks}: at least 2 (the speed-up compares p = 1 with more)"
    if args.max_ranks > cores:
        return (f"--max-ranks {args.max_ranks} is more than the {cores} cores this process may "
                f"use: every rank needs a core of its own, or the speed-up measures the "
                f"scheduler. Use --max-ranks {cores} or fewer")
    if args.limit is None:
        args.limit = SIZES[args.size]["limit"]
    if args.limit < 60:
        return f"--limit {args.limit:g}: at least 60 s (one job takes about 10 s to start)"
    if args.nodes == "yes" and nodes_problem:
        return f"--nodes yes: the nodes part {nodes_problem}"
    return None


def plan(max_ranks: int, cores: int) -> tuple[list[int], int]:
    """(the p of the scaling part, the p of the overlap part). The overlap part keeps a core
    free for each rank's communication (Gloo's thread and the kernel's TCP work), so that
    overlap has something to run on: p = cores / 2, within 2 and max_ranks."""
    p_overlap = max(2, min(max_ranks, cores // 2))
    ps = {1, max_ranks, p_overlap} | {2**k for k in range(4) if 2**k <= max_ranks}
    return sorted(ps), p_overlap


def balanced_batch(per_rank: int, compute_s: float, after_s: float) -> int:
    """The per-rank batch at which a step's compute takes as long as the all-reduce exposed
    after it, from one measurement at `per_rank` (compute grows with the batch, the
    all-reduce does not): a multiple of 8 within BATCH_RANGE."""
    comm = max(after_s - compute_s, 0.0)
    b = 8 * round(per_rank * comm / compute_s / 8) if compute_s > 0 else BATCH_RANGE[1]
    return int(min(max(b, BATCH_RANGE[0]), BATCH_RANGE[1]))


# -- one rank of the scaling part (under mpiexec) ------------------------------------

def rank_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--global-batch", type=int, required=True)


def scaling_rank(args: argparse.Namespace, job) -> None:
    """On every rank: time the three steps on this rank's share of the global batch; rank 0
    prints one JSON line."""
    import torch
    import torch.distributed as dist

    from dplab.timing import ranks_interleaved
    from labcode.overlap import make_step  # Lab 4's own code

    p, rank, device = job.world_size, job.rank, job.device
    mine = len(torch.tensor_split(torch.arange(args.global_batch), p)[rank])
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(mine, 784, generator=gen).to(device)
    y = torch.randint(0, 10, (mine,), generator=gen).to(device)
    configs = {"compute only": make_step("none", x, y, device)[1],
               "no overlap": make_step("after", x, y, device)[1],
               "DDP": make_step("ddp", x, y, device, CAP_MB)[1]}
    med = ranks_interleaved(configs, args.repeats, args.warmup, device)  # slowest rank, median
    if rank == 0:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        print(json.dumps({"p": p, "per_rank_batch": -(-args.global_batch // p),
                          "threads": torch.get_num_threads(), "backend": dist.get_backend(),
                          "device": device.type, "device_name": name, "seconds": med}), flush=True)


# -- the command ---------------------------------------------------------------------

class OutOfTime(Exception):
    """The run's time bound leaves too little for the next job."""


class Run:
    """The run's log, deadline and jobs."""

    def __init__(self, limit: float):
        self.lines: list[str] = []
        self.deadline = time.monotonic() + limit

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def bound(self, part: str) -> float:
        left = self.deadline - time.monotonic()
        if left < 15:
            raise OutOfTime(f"{left:.0f} s of --limit left")
        return min(JOB_S[part], left)

    def job(self, part: str, script: Path, p: int, argv: list, env: dict) -> str:
        """mpiexec -n p of script, bounded; its stdout, or an error with its stderr's end."""
        from dplab.cluster import jobs

        out = jobs.run_job(script, p, [str(a) for a in argv], timeout=self.bound(part), env=env)
        if out.returncode != 0:
            raise RuntimeError(f"mpiexec -n {p} {script.name} exited {out.returncode}:\n"
                               f"{out.stderr[-1500:]}")
        return out.stdout


def job_environment(device: str) -> dict[str, str]:
    """This process's environment less the kit's settings, then one thread per rank on the
    CPU (the whole machine's cores for one rank on a GPU) and the device."""
    from dplab.cluster.settings import to_environment, variables

    kit = set(variables())
    env = {k: v for k, v in os.environ.items() if k not in kit}
    if device == "cpu":
        env.update(to_environment(threads=1, device="cpu"), OMP_NUM_THREADS="1")
    else:
        env.update(to_environment(device=device))
    return env


def last_json(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"the job printed no result:\n{stdout[-1500:]}")
    return json.loads(lines[-1])


def scaling(run: Run, size: dict, ps: list[int], gpu: str | None) -> dict:
    """The scaling part: one job per p, then one on the GPU."""
    g = size["global_batch"]
    argv = ["--global-batch", g, "--repeats", size["repeats"], "--warmup", size["warmup"]]
    run.say(f"(a) strong scaling: Lab 4's wide MLP, global batch {g} split over p ranks, "
            f"one thread each; median of {size['repeats']} steps, slowest rank")
    run.say(f"{'p':>2} {'B/rank':>6} {'compute ms':>10} {'no ovl ms':>9} {'DDP ms':>7} "
            f"{'DDP samples/s':>13} {'speed-up':>8}")
    rows, cpu = [], job_environment("cpu")
    for p in ps:
        row = last_json(run.job("scaling", Path(__file__), p, argv, cpu))
        rows.append(row)
        t = row["seconds"]
        run.say(f"{p:>2} {row['per_rank_batch']:>6} {1e3 * t['compute only']:>10.1f} "
                f"{1e3 * t['no overlap']:>9.1f} {1e3 * t['DDP']:>7.1f} {g / t['DDP']:>13.0f} "
                f"{rows[0]['seconds']['DDP'] / t['DDP']:>7.2f}x")
    out = {"status": "ok", "kind": "strong", "global_batch": g, "repeats": size["repeats"],
           "threads_per_rank": rows[0]["threads"], "rows": rows, "gpu": None}
    if gpu:  # for scale only: its failure is said, and fails no part
        try:
            row = last_json(run.job("gpu", Path(__file__), 1, argv, job_environment("cuda")))
        except (OutOfTime, RuntimeError, TimeoutError) as e:
            out["gpu"] = {"status": f"failed: {e}"}
            run.say(f"one GPU: failed: {e}")
            return out
        out["gpu"] = {"status": "ok", **row}
        run.say(f"one GPU ({row['device_name']}), p = 1: DDP {1e3 * row['seconds']['DDP']:.1f} ms, "
                f"{g / row['seconds']['DDP']:.0f} samples/s")
    return out


DDP_ROW = re.compile(r"^(compute only|no overlap|hook overlap \d+ MiB|DDP bucket_cap_mb=\d+)"
                     r"\s+([\d.]+)\s+[\d.]+$", re.M)


def parse_ddp(text: str) -> dict:
    """benchmarks/ddp.py's table: each configuration's step ms, the best several-bucket hook
    configuration, and the ratios that say whether overlap paid."""
    ms = {m.group(1): float(m.group(2)) for m in DDP_ROW.finditer(text)}
    need = ("compute only", "no overlap", "hook overlap 50 MiB", "DDP bucket_cap_mb=25",
            "DDP bucket_cap_mb=50")
    missing = [k for k in need if k not in ms]
    if missing:
        raise ValueError(f"benchmarks/ddp.py printed no row for {', '.join(missing)}")
    hooks = {k: v for k, v in ms.items() if k.startswith("hook") and k != "hook overlap 50 MiB"}
    best = min(hooks, key=hooks.get)
    return {"ms": ms, "best_hook": best, "ratios": {
        "ddp_vs_after": ms["DDP bucket_cap_mb=25"] / ms["no overlap"],
        "hook_vs_one_bucket": ms[best] / ms["hook overlap 50 MiB"],
        "ddp_vs_one_bucket": ms["DDP bucket_cap_mb=25"] / ms["DDP bucket_cap_mb=50"],
        "comm_vs_compute": (ms["no overlap"] - ms["compute only"]) / ms["compute only"]}}


def overlap(run: Run, size: dict, scaled: dict, p: int) -> dict:
    """The overlap part: ddp.py at p ranks and the balanced per-rank batch."""
    row = next(r for r in scaled["rows"] if r["p"] == p)
    t = row["seconds"]
    b = balanced_batch(row["per_rank_batch"], t["compute only"], t["no overlap"])
    spare = "a core to spare per rank" if 2 * p <= usable_cores() else "no core to spare"
    run.say(f"(b) DDP overlap: benchmarks/ddp.py at p = {p} ({spare}), B = {b}: "
            f"at B = {row['per_rank_batch']} a step computed {1e3 * t['compute only']:.0f} ms "
            f"and its all-reduce added {1e3 * (t['no overlap'] - t['compute only']):.0f} ms")
    text = run.job("overlap", ROOT / "benchmarks" / "ddp.py", p,
                   ["--batch", b, "--repeats", size["repeats"], "--warmup", size["warmup"]],
                   job_environment("cpu"))
    for line in text.splitlines():
        run.say("    " + line)
    parsed = parse_ddp(text)
    r = parsed["ratios"]
    run.say(f"overlap, same code: hooks {parsed['best_hook'].split()[-2]} MiB / one bucket "
            f"{r['hook_vs_one_bucket']:.3f}; DDP 25 MiB / 50 MiB {r['ddp_vs_one_bucket']:.3f}; "
            f"communication / compute without overlap {r['comm_vs_compute']:.2f}")
    return {"status": "ok", "p": p, "batch": b, **parsed}


def nodes(run: Run, size: dict) -> dict:
    """The nodes part: topology.py in a child process of its own, bounded, its files in a
    temporary folder; the cluster is stopped whatever happens."""
    run.say("(c) flat ring vs hierarchical all-reduce: benchmarks/topology.py, 4 ranks on "
            "2 nodes of network namespaces, links shaped to 1 gbit/s")
    bound = run.bound("nodes")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(Path(__file__)), "--topology-into", tmp,
               "--repeats", str(size["node_repeats"])]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            stop_nodes()
            return {"status": f"failed: did not finish in {bound:.0f} s"}
        finally:
            if proc.poll() is None:   # interrupted: end it, then the cluster
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                stop_nodes()
        table = Path(tmp, "topology.txt")
        text = (table.read_text() if table.exists() else out).replace(
            "run by make bench-nodes", "run by make bench-big")
        for line in text.splitlines():
            run.say("    " + line)
        if proc.returncode != 0 or not Path(tmp, "topology.json").exists():
            return {"status": f"failed: topology.py exited {proc.returncode}", "text": out[-3000:]}
        return {"status": "ok", "topology": json.loads(Path(tmp, "topology.json").read_text())}


def stop_nodes() -> None:
    """Stop topology.py's private cluster if it is there (tools/slurm/stop.sh, bounded)."""
    if NODES_DIR.exists():
        subprocess.run([str(ROOT / "tools" / "slurm" / "stop.sh"), str(NODES_DIR)], timeout=120)


def topology_child(folder: Path, repeats: int) -> int:
    """Run topology.py's main with its report written to `folder`, not over make bench-nodes'."""
    from benchmarks import topology

    if not isinstance(getattr(topology, "RESULTS", None), Path):  # else its report goes there
        raise SystemExit("benchmarks/topology.py has no RESULTS folder to redirect: its report "
                         "would overwrite make bench-nodes' files")
    topology.RESULTS = folder
    return topology.main(["--repeats", str(repeats)])


def end_children() -> list[str]:
    """End every process this one started (and theirs), and the MPICH files they hold; their
    command lines."""
    import psutil

    from dplab.cluster.processes import end, files_held_open, remove

    procs = psutil.Process().children(recursive=True)
    names = []
    for proc in procs:
        try:
            names.append(" ".join(proc.cmdline())[:80])
        except psutil.Error:
            pass
    files = files_held_open(procs)
    end(procs, grace=5)
    remove(files)
    return names


def redraw() -> str:
    """Redraw img/bench_big/ from the saved results; what happened."""
    import importlib.util

    script = ROOT / "img" / "bench_big" / "make_figures.py"
    spec = importlib.util.spec_from_file_location("figures_bench_big", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        module.main()
    except ImportError as e:
        return f"figures not redrawn ({e}): run {script.relative_to(ROOT)} where matplotlib is"
    return f"figures redrawn: {script.parent.relative_to(ROOT)}/"


def orchestrate(args: argparse.Namespace, cores: int, nodes_problem: str | None) -> int:
    size = SIZES[args.size]
    run = Run(args.limit)
    gpu = None if args.no_gpu else gpu_name()
    machine = machine_info(cores, gpu)
    paths = br.result_paths(machine, args.size, args.out)
    problem = br.another_machine(paths[0], machine)
    if problem:
        raise SystemExit(f"bench-big: {problem}")
    ps, p_overlap = plan(args.max_ranks, cores)
    stamp = datetime.now(timezone.utc)
    run.say(f"$ python benchmarks/big/bench_big.py --size {args.size} --max-ranks {args.max_ranks}"
            f"   # make bench-big, {stamp:%Y-%m-%d %H:%M UTC}")
    run.say(f"machine: {br.describe(machine)}, Python {machine['python']}, {machine['os']}; "
            f"{machine['physical_cores']} physical cores in all")
    run.say(f"uses at most {max(ps)} of the {cores} cores this process may use, one torch thread "
            f"per rank (Gloo on the CPU){'; and the GPU for one step' if gpu else ''}; "
            f"bounded by {args.limit:.0f} s")
    result = {"bench": "make bench-big", "size": args.size,
              "date": stamp.isoformat(timespec="seconds"), "machine": machine,
              "max_ranks": args.max_ranks}
    parts = [("scaling", lambda: scaling(run, size, ps, gpu)),
             ("overlap", lambda: overlap(run, size, result["scaling"], p_overlap)),
             ("nodes", lambda: nodes(run, size))]
    t0 = time.monotonic()
    for name, part in parts:
        run.say()
        if name == "overlap" and result["scaling"]["status"] != "ok":
            result[name] = {"status": "skipped: the scaling part failed"}
        elif name == "nodes" and (args.nodes == "no" or nodes_problem):
            why = "--nodes no" if args.nodes == "no" else nodes_problem
            result[name] = {"status": f"skipped: {why}"}
        else:
            started = time.monotonic()
            try:
                result[name] = part()
            except (OutOfTime, RuntimeError, ValueError, TimeoutError) as e:
                result[name] = {"status": f"failed: {e}"}
            result[name]["seconds"] = round(time.monotonic() - started, 1)
        run.say(f"[{name}: {result[name]['status'].splitlines()[0]}]")
    run.say()
    run.say(f"whole run {time.monotonic() - t0:.0f} s")
    json_path, txt_path = br.save(result, "\n".join(run.lines) + "\n", args.out)
    print(f"saved {json_path} and {txt_path.name}")
    if args.out.resolve() == br.RESULTS.resolve():
        print(redraw())
    failed = [n for n, _ in parts if result[n]["status"].startswith("failed")]
    if failed:
        print(f"bench-big: {', '.join(failed)} failed (see above)", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    from dplab.cluster.settings import in_mpi_job

    if in_mpi_job():
        from dplab.cluster import jobs

        return jobs.main(__file__, scaling_rank, ranks=1, add_arguments=rank_arguments, argv=argv)
    ap = parser()
    args = ap.parse_args(argv)
    if args.topology_into is not None:
        return topology_child(args.topology_into, args.repeats or SIZES["full"]["node_repeats"])
    cores = usable_cores()
    nodes_problem = can_run_nodes() if args.nodes != "no" else None
    problem = check(args, cores, nodes_problem)
    if problem:
        ap.error(problem)
    args.out.mkdir(parents=True, exist_ok=True)

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        return orchestrate(args, cores, nodes_problem)
    except KeyboardInterrupt:
        print("bench-big: interrupted; nothing saved", file=sys.stderr)
        return 130
    finally:
        left = end_children()
        if left:
            print(f"bench-big: ended {len(left)} process(es) left behind: {left}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
