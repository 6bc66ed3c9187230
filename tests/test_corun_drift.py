"""benchmarks/corun_drift.py: the summary of a hand-built table with exact values, and bad arguments refused
before any worker starts."""

import math

import pandas as pd
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError


def test_ranges_and_the_rank_correlation_of_the_split_with_the_slowdown():
    drift = benchmark_script("corun_drift")
    table = pd.DataFrame({"corun_slowdown": [0.01, 0.12, 0.05, 0.03], "split_over_single": [1.10, 1.40, 1.30, 1.20]})
    assert drift.drift_summary(table) == {"rounds": 4, "corun_min": 0.01, "corun_max": 0.12,
                                          "split_over_single_min": 1.10, "split_over_single_max": 1.40,
                                          "rank_correlation": pytest.approx(1.0)}
    table["split_over_single"] = [1.40, 1.10, 1.20, 1.30]  # the other way round
    assert drift.drift_summary(table)["rank_correlation"] == pytest.approx(-1.0)
    assert math.isnan(drift.drift_summary(table.head(2))["rank_correlation"])


@pytest.mark.parametrize("argv, field", [(["--rounds", "0"], "--rounds"), (["--steps", "0"], "--steps"),
                                         (["--probe-repeats", "0"], "--probe-repeats")])
def test_bad_arguments_are_refused_naming_them(tmp_path, argv, field):
    with pytest.raises(TrinityError) as err:
        benchmark_script("corun_drift").main(argv + ["--csv", str(tmp_path / "drift.csv")])
    assert err.value.field == field
    assert not (tmp_path / "drift.csv").exists()
