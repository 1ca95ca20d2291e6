"""What a notebook shows for a cluster error fits its output box, and says all it says."""
from dplab.cluster.watch import WIDTH, RankDiedError, StuckRanksError


def test_a_long_message_is_wrapped_to_the_box_and_loses_no_word():
    message = ("rank 3 failed: ValueError: a typo in the lab's step, raised while the other "
               "ranks waited in torch.distributed.all_reduce for it\n"
               "ranks 0, 1, 2 were still running 3 s later, waiting in all_reduce "
               "(cell line 7): the cluster was stopped\n\n"
               "Run cluster.restart() to start 4 engines again (gloo, cpu), then rerun")
    for cls, extra in ((StuckRanksError, ()), (RankDiedError, ({},))):
        shown = cls(message, {}, {}, *extra)._render_traceback_()
        assert max(map(len, shown)) <= WIDTH, shown
        assert shown[0].startswith(f"{cls.__name__}: rank 3 failed")
        assert " ".join(" ".join(shown).split()) == " ".join(
            f"{cls.__name__}: {message}".split())
        assert "" in shown  # the blank line between cause and remedy stays
