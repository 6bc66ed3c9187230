"""benchmarks/measurement_noise.py: the parts of the measurement's variation on a hand-built case, the sample
of strategies it measures, its refusals."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trinity.errors import TrinityError

from conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return benchmark_script("measurement_noise")


def test_noise_figures_split_the_variation_exactly():
    steps = np.array([[[30, 12, 12], [11, 10, 12], [14, 13, 15]],  # a slow first step on fresh workers
                      [[20, 20, 20], [21, 20, 20], [22, 22, 22]]], float)
    f = _script().noise_figures(steps)
    assert (f["strategies"], f["rounds"], f["steps"]) == (2, 3, 3)
    assert f["step_sd_ms"] == pytest.approx(np.sqrt(2) / 2)  # rounds 1-2, steps 1-2: sd 2**0.5 twice, 0 twice
    assert f["round_sd_ms"] == pytest.approx(np.std([15.5, 18], ddof=1))  # rounds 1, 2: medians over strategies
    assert f["session_sd_ms"] == pytest.approx(np.std([-4.5, -4], ddof=1))  # A's sessions less them, as B's
    assert f["strategy_sd_ms"] == pytest.approx(np.std([12.5, 21], ddof=1))
    assert f["first_round_excess_ms"] == pytest.approx((12 - 12.5 + 20 - 21) / 2)
    assert f["first_step_excess_ms"] == pytest.approx((18 + 0 + 0 + 0 + 1 + 0) / 6)
    assert np.isnan(f["split_half_rank"])  # two strategies always agree or disagree: no rank evidence


def test_noise_figures_refuse_too_few_rounds():
    with pytest.raises(TrinityError, match="at least 2 each"):
        _script().noise_figures(np.ones((3, 1, 3)))


def test_sample_spreads_over_held_out_split_strategies():
    table = pd.DataFrame({"strategy": list("abcdefg"), "real_step_ms": [7, 1, 5, 3, 2, 6, 4],
                          "calibration_set": [False, False, False, True, False, False, False],
                          "real_crossed_MB": [1, 1, 1, 1, 1, 1, 0]})
    # held-out split, by time: b(1) e(2) c(5) f(6) a(7); d is fitted, g sends nothing
    assert _script().sample(table, 3) == ["b", "c", "a"]
    assert _script().sample(table, 10) == ["b", "e", "c", "f", "a"]


def test_refuses_a_missing_validation_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measurement_noise.py"),
                        "--validation", str(tmp_path / "none")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert "--validation" in r.stderr and "Traceback" not in r.stderr


def test_steps_table_round_trips_to_the_array(tmp_path):
    s = np.arange(2 * 3 * 4, dtype=float).reshape(2, 3, 4)
    idx = np.indices(s.shape).reshape(3, -1)
    rows = pd.DataFrame({"warmup": 1, "strategy": np.array(["z", "a"])[idx[0]], "round": idx[1], "step": idx[2],
                         "step_ms": s.ravel()}).sample(frac=1, random_state=0)  # any row order
    rows = rows.sort_values("strategy", key=lambda x: x != "z", kind="stable")  # z first, as measured
    np.testing.assert_array_equal(_script().as_array(rows), s)
    path = tmp_path / "steps.csv"
    rows.drop(columns="step_ms").to_csv(path, index=False)
    with pytest.raises(TrinityError, match=r"lacks column\(s\) \['step_ms'\]"):
        _script().steps_table(path)


def test_rank_by_rounds_against_the_simulator_and_the_measurements_own_retest():
    # 3 strategies x 4 rounds x 1 step; simulated 1 < 2 < 3
    steps = np.array([[[10], [10], [10], [10]],
                      [[30], [20], [20], [20]],   # round 1 slow: the first round puts it last
                      [[20], [30], [30], [30]]], float)
    r = _script().rank_by_rounds(steps, np.array([1.0, 2.0, 3.0]), [1, 2, 4]).set_index("rounds")
    assert r.loc[1, "sim_rank"] == pytest.approx(0.5)  # first round: 10, 30, 20
    assert r.loc[1, "retest_rank"] == pytest.approx(0.5)  # round 1 against round 2: (1, 3, 2) and (1, 2, 3)
    tied = np.corrcoef([1, 2.5, 2.5], [1, 2, 3])[0, 1]  # 0.866
    assert r.loc[2, "sim_rank"] == pytest.approx(tied)  # medians 10, 25, 25: the tie ranked 2.5 twice
    assert r.loc[2, "retest_rank"] == pytest.approx(tied)  # rounds 3-4: 10, 20, 30
    assert r.loc[4, "sim_rank"] == pytest.approx(1.0) and np.isnan(r.loc[4, "retest_rank"])
    with pytest.raises(TrinityError, match="5 rounds asked for, 4 measured"):
        _script().rank_by_rounds(steps, np.array([1.0, 2.0, 3.0]), [5])
