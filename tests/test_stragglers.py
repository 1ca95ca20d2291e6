"""Lab 8's straggler model against Monte Carlo, and its parameter server and local SGD under mpiexec."""
import math

import numpy as np
import pytest

from labcode.stragglers import expected_step_time, p_step_delayed, step_time_quantile, straggler_delay

from tests.support.mpi import assert_every_rank_passes


@pytest.mark.parametrize("p,k", [(1, 0), (5, 0), (5, 1), (8, 2)])
def test_chance_of_a_delayed_step_matches_monte_carlo_of_the_seeded_delays(p, k):
    q, d, steps = 0.2, 0.01, 20000
    draws = np.array([[straggler_delay(r, s, q, d, seed=7) for r in range(p)] for s in range(steps)])
    assert set(np.unique(draws)) <= {0.0, d}
    # the step waits for the (k+1)-th slowest rank: delayed when more than k ranks straggle
    mc = float(((draws > 0).sum(axis=1) > k).mean())
    want = p_step_delayed(p, q, k)
    assert abs(mc - want) <= 5 * math.sqrt(want * (1 - want) / steps) + 1e-12
    kth = np.sort(draws, axis=1)[:, p - 1 - k] if k < p else np.zeros(steps)
    assert abs((0.05 + kth).mean() - expected_step_time(0.05, p, q, d, k)) <= 5 * d * math.sqrt(want / steps)


def test_expected_maximum_is_the_closed_form_and_grows_with_p_while_the_median_waits():
    q, d = 0.1, 0.03
    assert p_step_delayed(4, q) == pytest.approx(1 - 0.9**4, rel=1e-15)
    assert expected_step_time(0.01, 1, q, d) == pytest.approx(0.01 + d * q)
    means = [expected_step_time(0.0, p, q, d) for p in range(1, 65)]
    assert all(a < b for a, b in zip(means, means[1:]))
    # the median moves once (1 - q)^p < 1/2, at p = 7 for q = 0.1; the p99 at p = 1 already
    assert [step_time_quantile(0, p, q, d, 0.5) for p in (6, 7)] == [0.0, d]
    assert step_time_quantile(0, 1, q, d, 0.99) == d
    assert p_step_delayed(3, q, 3) == pytest.approx(0.0, abs=1e-15)   # more than p ranks never straggle


def test_parameter_server_applies_each_gradient_once_and_local_sgd_h1_is_sync_under_mpiexec():
    assert_every_rank_passes("check_stragglers.py", 3, ['once', 'exact', 'stale', 'backup', 'h1', 'rounds'])


def simulated_marks(p, steps, broken=None, c=0.001, ar=0.0005, up=0.0002):
    """What sync_sgd_step's marks record on p ranks that compute c, sleep their injected
    delay, all-reduce (which ends ar after the last rank joins) and update. broken: "early",
    the all-reduce's mark taken before it starts; "no sleep", the sleep not marked, so that
    it counts as all-reduce."""
    from labcode.stragglers import phase_events
    marks = {r: [] for r in range(p)}
    for s in range(steps):
        t0 = 10.0 * s
        joined = max(t0 + c + straggler_delay(r, s) for r in range(p))
        for r in range(p):
            slept = t0 + c + straggler_delay(r, s)
            done = joined + ar
            marks[r] += [(s, "start", t0), (s, "compute", t0 + c),
                         (s, "sleep", t0 + c if broken == "no sleep" else slept),
                         (s, "all-reduce", slept if broken == "early" else done),
                         (s, "update", done + up)]
    return [e for r in range(p) for e in phase_events(marks[r], r)]


@pytest.mark.parametrize("broken", [None, "early", "no sleep"])
def test_lab8_timeline_puts_the_wait_in_the_all_reduce_and_its_check_catches_broken_marks(broken):
    """Lab 8's timeline check: in a step where another rank slept d, a rank's all-reduce takes
    d more than a sleeper's (median within d/2), and in a clean step about a sleeper's. An
    all-reduce mark taken before the all-reduce, or a sleep left unmarked, breaks one of them."""
    from labcode.stragglers import STRAGGLER_D as d, all_reduce_extra
    p, steps = 4, 60
    delays = np.array([[straggler_delay(r, s) for r in range(p)] for s in range(steps)])
    extra = all_reduce_extra(simulated_marks(p, steps, broken), delays)
    assert extra["delayed"].size and extra["clean"].size
    holds = (abs(np.median(extra["delayed"]) - d) < d / 2
             and abs(np.median(extra["clean"])) < d / 2)
    assert bool(holds) == (broken is None), {k: np.median(v) for k, v in extra.items()}
