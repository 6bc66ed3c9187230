"""benchmarks/validation_gap.py: the held-out splits' gap to the simulator, a fixed cost per step and one per
tensor, on hand-built validation tables with exact values."""

import pandas as pd
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError
from trinity.fileio import write_json


def _results(path, batch, run, fixed_ms, per_tensor_ms, transfers=(10, 20, 40, 80)):
    """A part's results.csv: the one-worker anchor (no gap), a fit-set row (ignored) and held-out splits whose
    measured step is the simulated one plus ``fixed_ms`` + ``per_tensor_ms`` a crossing tensor."""
    path.mkdir(parents=True, exist_ok=True)
    rows = [{"strategy": "single", "source": "single", "calibration_set": True, "sim_step_ms": 100.0,
             "real_step_ms": 100.0, "real_crossed_MB": 0.0, "real_transfers": 0, "real_spread": 0.02,
             "steal_max": 0.001, "other_cpu_max": 0.0},
            {"strategy": "metis", "source": "metis", "calibration_set": True, "sim_step_ms": 70.0,
             "real_step_ms": 500.0, "real_crossed_MB": 5.0, "real_transfers": 7, "real_spread": 0.02,
             "steal_max": 0.03, "other_cpu_max": 0.0}]
    rows += [{"strategy": f"s{n}", "source": "search", "calibration_set": False, "sim_step_ms": 60.0 + n,
              "real_step_ms": 60.0 + n + fixed_ms + per_tensor_ms * n, "real_crossed_MB": 1.0,
              "real_transfers": n, "real_spread": 0.01 * (i + 1), "steal_max": 0.002, "other_cpu_max": 0.004}
             for i, n in enumerate(transfers)]
    pd.DataFrame(rows).assign(batch=batch, run=run).to_csv(path / "results.csv", index=False)


def test_a_fixed_and_a_per_tensor_cost_are_read_back_exactly_per_part(tmp_path):
    folder = tmp_path / "validate" / "m"
    _results(folder, 64, 1, fixed_ms=0.0, per_tensor_ms=0.5)
    _results(folder / "batch8", 8, 1, fixed_ms=50.0, per_tensor_ms=0.0)
    _results(folder / "run2", 64, 2, fixed_ms=10.0, per_tensor_ms=0.25)
    (folder / "calibration").mkdir()  # run 1's calibration simulated the slowdown it measured; run 2 has no report
    write_json(folder / "calibration" / "calibration.json",
               {"shared_machine": {"corun_slowdown": 0.03}, "transfer_fit": {"corun_slowdown": None}})
    out = tmp_path / "gap.csv"
    benchmark_script("validation_gap").main([str(folder), "--csv", str(out)])
    table = pd.read_csv(out)
    assert list(zip(table["run"], table["batch"])) == [(1, 64), (1, 8), (2, 64)]
    assert table["gap_fixed_ms"].tolist() == pytest.approx([0.0, 50.0, 10.0], abs=1e-9)
    assert table["gap_per_tensor_us"].tolist() == pytest.approx([500.0, 0.0, 250.0], abs=1e-6)
    # run 1 at b64: gaps 5, 10, 20 and 40 ms, median 15; run 2: 12.5, 15, 20 and 30, median 17.5
    assert table["gap_median_ms"].tolist() == pytest.approx([15.0, 50.0, 17.5])
    assert table["one_worker_ms"].tolist() == [100.0] * 3 and table["held_out_splits"].tolist() == [4] * 3
    assert table.loc[0, "split_real_median_ms"] == pytest.approx(105.0)  # 75, 90, 120, 180
    assert table.loc[0, "spread_median"] == pytest.approx(0.025)
    assert table.loc[0, "steal_max"] == 0.03 and table.loc[0, "other_cpu_max"] == 0.004
    assert table["corun_measured"].tolist()[:2] == [0.03, 0.03] and table["corun_simulated"].tolist()[:2] == [0.03] * 2
    assert table.loc[2, ["corun_measured", "corun_simulated"]].isna().all()


def test_a_fitted_corun_slowdown_is_the_one_simulated(tmp_path):
    folder = tmp_path / "m"
    _results(folder, 64, 1, fixed_ms=0.0, per_tensor_ms=0.0)
    (folder / "calibration").mkdir()
    write_json(folder / "calibration" / "calibration.json",
               {"shared_machine": {"corun_slowdown": 0.06}, "transfer_fit": {"corun_slowdown": 0.05}})
    benchmark_script("validation_gap").main([str(folder), "--csv", str(tmp_path / "gap.csv")])
    assert pd.read_csv(tmp_path / "gap.csv")[["corun_measured", "corun_simulated"]].values.tolist() == [[0.06, 0.05]]


def test_a_folder_that_is_no_validation_is_refused_naming_it(tmp_path):
    with pytest.raises(TrinityError) as err:
        benchmark_script("validation_gap").main([str(tmp_path), "--csv", str(tmp_path / "gap.csv")])
    assert err.value.field == "results.csv" and err.value.source == str(tmp_path)
    assert not (tmp_path / "gap.csv").exists()
