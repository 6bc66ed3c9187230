import math

import numpy as np
import pytest

from trinity.reward import MDPEConfig, hierarchical_reward, mdpe_reward, mdpe_terms
from trinity.sim.result import SimResult


def result(step_us, comm, mem, capacity=11e9, lb=1000.0):
    return SimResult(step_time_us=step_us, busy_us=np.zeros(2), sent_bytes=np.array([comm, 0.0]),
                     received_bytes=np.zeros(2), peak_memory_bytes=np.array([mem, 0.0]),
                     out_of_memory=np.array([mem > capacity, False]), lower_bound_us=lb,
                     op_start=np.zeros(1), op_end=np.zeros(1), placement=np.zeros(1, np.int64))


def test_mdpe_within_tolerances_is_runtime_only():
    r = result(2000.0, 1e9, 2e9)
    assert mdpe_terms(r) == {"runtime": 1.0, "comm": 0.0, "memory": 0.0}
    assert mdpe_reward(r) == 0.0  # -log(0.5 * 2000 / 1000)


def test_mdpe_penalties_over_tolerance():
    r = result(1000.0, 12e9, 10e9, capacity=16e9)
    terms = mdpe_terms(r)
    assert terms["runtime"] == 0.5
    assert terms["comm"] == pytest.approx(0.3 * 0.5)  # 12 GB over 8 GB tolerance: 50% excess
    assert terms["memory"] == pytest.approx(0.2 * 0.25)
    assert mdpe_reward(r) == pytest.approx(-math.log(0.7))


def test_mdpe_orders_by_runtime_and_fails_oom():
    fast, slow = result(1500.0, 0, 0), result(3000.0, 0, 0)
    assert mdpe_reward(fast) > mdpe_reward(slow)
    oom = result(1000.0, 0, 12e9)
    assert mdpe_reward(oom) == pytest.approx(-math.log(0.5 * 100 + 0.3 + 0.2))
    assert mdpe_reward(oom) < mdpe_reward(result(50_000.0, 20e9, 10e9))


def test_hierarchical_reward():
    assert hierarchical_reward(result(250_000.0, 0, 0)) == -0.5
    assert hierarchical_reward(result(1.0, 0, 12e9), fail_runtime_ratio=10) == pytest.approx(-math.sqrt(0.01))


def test_bad_reward_config():
    with pytest.raises(ValueError, match="reward.beta"):
        MDPEConfig(beta=float("nan"))
