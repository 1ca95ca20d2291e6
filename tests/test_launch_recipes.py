"""The one-machine launch recipes in launch/ (mpiexec, torchrun standalone and multi-node)
set up the ranks as the launching chapter says, and train to the single-process result."""
import socket

from tests.support.recipes import check_mapping, check_training, environment, rank_lines, reference, run


def in_folder(tmp_path) -> dict[str, str]:
    """The recipes' environment, with TMPDIR a folder of the test's own: torchrun makes a
    torchelastic_* log folder there and leaves it."""
    return environment(TMPDIR=str(tmp_path))


def test_reference_is_one_process_with_the_whole_batch():
    ref = reference()
    assert (ref.rank, ref.world_size, ref.local_rank) == (0, 1, 0)


def test_mpiexec_recipe_maps_pmi_ranks_to_torch_ranks(leaves_nothing):
    lines = rank_lines(run(["bash", "launch/mpiexec.sh"], timeout=120).stdout)
    check_mapping(lines, [socket.gethostname()], per_node=2)
    check_training(lines, world_size=2)


def test_torchrun_standalone_recipe_trains_like_one_process(leaves_nothing, tmp_path):
    out = run(["bash", "launch/torchrun_standalone.sh"], timeout=120, env=in_folder(tmp_path))
    lines = rank_lines(out.stdout)
    check_mapping(lines, [socket.gethostname()], per_node=2)
    check_training(lines, world_size=2)


def test_torchrun_multinode_recipe_gives_each_agent_two_consecutive_ranks(leaves_nothing, tmp_path):
    out = run(["bash", "launch/torchrun_multinode.sh"], timeout=180, env=in_folder(tmp_path))
    lines = rank_lines(out.stdout)
    # Both agents run here, so both "nodes" are this host; which agent gets ranks 0-1 is
    # the rendezvous's choice, but each agent's workers are local ranks 0, 1 of one block.
    check_mapping(lines, [socket.gethostname()] * 2, per_node=2)
    check_training(lines, world_size=4)
