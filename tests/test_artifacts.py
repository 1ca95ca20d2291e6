"""dplab.artifacts: each run of a lab gets a folder of its own; old runs' folders go."""
import os
import time

from dplab.artifacts import KEPT_S, run_folder


def test_two_runs_never_share_a_folder_and_only_old_runs_folders_go(tmp_path):
    root = str(tmp_path / "artifacts")
    first, second = run_folder("lab4", root), run_folder("lab4", root)
    assert first != second and os.path.isdir(first) and os.path.isdir(second)
    open(os.path.join(first, "rank0.json"), "w").close()
    old = time.time() - KEPT_S - 60
    os.utime(first, (old, old))                     # a run of yesterday
    third = run_folder("lab4", root)
    assert not os.path.exists(first), "a folder older than KEPT_S was kept"
    assert os.path.isdir(second) and os.path.isdir(third), "a recent run's folder was removed"
    other_lab = run_folder("lab8", root)
    os.utime(other_lab, (old, old))
    run_folder("lab4", root)
    assert os.path.isdir(other_lab), "another lab's folders are that lab's to clear"
