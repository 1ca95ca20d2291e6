"""Lab 8's straggler model against Monte Carlo, and its parameter server and local SGD under mpiexec."""
import math

import numpy as np
import pytest

from labcode.stragglers import expected_step_time, p_step_delayed, step_time_quantile, straggler_delay

from conftest import assert_every_rank_passes


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
