"""make bench-big's own checks, in seconds and without MPI: the options it refuses, how it plans
the ranks, and how its result files are named, guarded and read back (benchmarks/big/)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
from benchmarks.big import bench_big  # noqa: E402
from benchmarks.big import big_results as br  # noqa: E402

H100 = {"cores": 16, "cpu": "Intel(R) Xeon(R) Platinum 8480+", "gpu": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0+cu130", "python": "3.12.3", "os": "Linux"}
BOX = {"cores": 2, "cpu": "AMD EPYC", "gpu": None, "torch": "2.13.0+cpu", "python": "3.11.7",
       "os": "Linux"}


def options(*argv: str) -> argparse.Namespace:
    return bench_big.parser().parse_args(list(argv))


def test_more_ranks_than_cores_is_refused_naming_the_cores():
    problem = bench_big.check(options("--max-ranks", "12"), cores=8, nodes_problem=None)
    assert "12 is more than the 8 cores" in problem and "--max-ranks 8 or fewer" in problem


def test_the_defaults_fit_the_machine():
    for cores, want in ((2, 2), (6, 6), (16, 8), (64, 8)):
        args = options()
        assert bench_big.check(args, cores, None) is None
        assert args.max_ranks == want and args.limit == bench_big.SIZES["full"]["limit"]
    args = options("--size", "rehearsal")
    assert bench_big.check(args, 2, None) is None
    assert args.limit == bench_big.SIZES["rehearsal"]["limit"]


@pytest.mark.parametrize("argv, cores, says", [
    ((), 1, "needs at least 2"),
    (("--max-ranks", "1"), 4, "at least 2"),
    (("--max-ranks", "0"), 4, "at least 2"),
    (("--limit", "10"), 4, "at least 60 s"),
    (("--nodes", "yes"), 4, "needs root"),
])
def test_bad_options_are_refused_with_what_to_do(argv, cores, says):
    assert says in bench_big.check(options(*argv), cores, "needs root (network namespaces)")


def test_the_plan_keeps_a_core_per_rank_for_communication_in_the_overlap_part():
    assert bench_big.plan(8, 16) == ([1, 2, 4, 8], 8)
    assert bench_big.plan(6, 12) == ([1, 2, 4, 6], 6)
    assert bench_big.plan(8, 12) == ([1, 2, 4, 6, 8], 6)
    assert bench_big.plan(2, 2) == ([1, 2], 2)


def test_the_balanced_batch_makes_compute_as_long_as_the_exposed_all_reduce():
    # at B = 64: 50 ms of compute, 100 ms with the all-reduce after it: 50 ms of each at B = 64
    assert bench_big.balanced_batch(64, 0.050, 0.100) == 64
    assert bench_big.balanced_batch(64, 0.100, 0.125) == 16
    assert bench_big.balanced_batch(64, 0.001, 1.0) == bench_big.BATCH_RANGE[1]
    assert bench_big.balanced_batch(64, 0.050, 0.040) == bench_big.BATCH_RANGE[0]


def test_the_file_name_names_cores_cpu_gpu_and_the_rehearsal():
    json_path, txt_path = br.result_paths(H100, "full", Path("r"))
    assert json_path.name == "big_16core-intel-xeon-platinum-8480-nvidia-h100-80gb-hbm3.json"
    assert txt_path.name == json_path.with_suffix(".txt").name
    rehearsal = br.result_paths(BOX, "rehearsal", Path("r"))[0]
    assert rehearsal.name == "big_2core-amd-epyc_rehearsal.json"
    assert br.result_paths({**H100, "gpu": None}, "full")[0] != json_path
    with pytest.raises(ValueError):
        br.result_paths(BOX, "huge")


def result(machine: dict, size: str = "full", date: str = "2026-11-27T10:00:00+00:00") -> dict:
    return {"size": size, "date": date, "machine": machine, "scaling": {"status": "ok"}}


def test_a_file_of_another_machine_is_never_overwritten(tmp_path):
    json_path, _ = br.save(result(BOX), "box\n", tmp_path)
    br.save(result({**BOX, "torch": "2.15.0"}), "box again\n", tmp_path)  # same machine, new torch
    other = {**BOX, "cpu": "AMD EPYC!"}  # another CPU whose name makes the same file name
    assert br.result_paths(other, "full", tmp_path)[0] == json_path
    with pytest.raises(FileExistsError, match="another machine"):
        br.save(result(other), "other\n", tmp_path)
    assert json.loads(json_path.read_text())["machine"]["torch"] == "2.15.0"
    json_path.write_text("[]")
    assert "no result of make bench-big" in br.another_machine(json_path, BOX)


def test_the_pair_is_the_two_core_machine_and_the_largest(tmp_path):
    assert br.pick_pair([]) == (None, None)
    br.save(result(BOX, "rehearsal"), "", tmp_path)
    small, large = br.pick_pair(br.load_all(tmp_path))
    assert small["file"] == "big_2core-amd-epyc_rehearsal.json" and large is None
    br.save(result({**H100, "cores": 8, "gpu": None}), "", tmp_path)
    br.save(result(H100, "rehearsal"), "", tmp_path)
    br.save(result({**H100, "gpu": None}), "", tmp_path)
    small, large = br.pick_pair(br.load_all(tmp_path))
    assert small["machine"] == BOX
    # 16 cores twice: the full run before the rehearsal, though the other has a GPU
    assert large["machine"]["cores"] == 16 and large["size"] == "full"
    assert "(rehearsal)" in br.label(small) and "H100" not in br.label(large)


def test_the_stored_ddp_table_parses():
    parsed = bench_big.parse_ddp((ROOT / "benchmarks" / "results" / "ddp.txt").read_text())
    assert parsed["best_hook"].startswith("hook overlap") and "50 MiB" not in parsed["best_hook"]
    assert set(parsed["ratios"]) == {"ddp_vs_after", "hook_vs_one_bucket", "ddp_vs_one_bucket",
                                     "comm_vs_compute"}
    with pytest.raises(ValueError, match="no row for"):
        bench_big.parse_ddp("no overlap  1.0  1.0\n")
