"""benchmarks/validation_what_if.py: one cluster term changed at a time, judged on a hand-built validation."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import benchmark_script, make_cluster
from test_resimulate import validation_folder

ROOT = Path(__file__).resolve().parents[1]


def test_a_change_sets_scales_or_adds_to_a_term():
    what_if = benchmark_script("validation_what_if")
    cluster = make_cluster(2)
    new = what_if.changed(cluster, {"link_streams": 2, "latency": "x0.5", "step_sync_us": "+1000",
                                    "ready_order": "fifo", "corun_slowdown": "x2"})
    assert new.link_streams == 2 and new.step_sync_us == cluster.step_sync_us + 1000 and new.ready_order == "fifo"
    assert np.array_equal(new.latency, cluster.latency * 0.5) and new.corun_slowdown == 2 * cluster.corun_slowdown


def test_each_variant_is_judged_on_held_out_and_fit_set(tmp_path):
    """The hand-built validation of test_resimulate, `both` in the fit set, a second run of it (`both-again`)
    held out, and `single` the rounds' anchor (measured as simulated: scale 1). One stream: both ends 20 us
    simulated against 19 measured (fit set error 1/19), held out 1/19, b-only 0 and c-only 0 (median 0, rank
    sqrt(3)/2: ranks 3, 2, 1 against 2.5, 2.5, 1); two streams: 19 us, every error 0 and rank 1."""
    import shutil

    what_if = benchmark_script("validation_what_if")
    validation_folder(tmp_path, make_cluster(2))
    shutil.copy(tmp_path / "strategies" / "both.json", tmp_path / "strategies" / "both-again.json")
    table = pd.read_csv(tmp_path / "results.csv")
    table = pd.concat([table, table[table["strategy"] == "both"].assign(strategy="both-again")], ignore_index=True)
    table["source"] = table["strategy"]
    table["calibration_set"] = table["strategy"] == "both"
    table.to_csv(tmp_path / "results.csv", index=False)
    rows = what_if.what_if([tmp_path], {"calibrated": {}, "two streams": {"link_streams": 2}}).set_index("variant")
    assert list(rows.index) == ["calibrated", "two streams"]
    assert (rows["batch"] == 4).all() and (rows["run"] == 1).all()
    assert rows.loc["calibrated", "fit_set_error"] == pytest.approx(1 / 19)
    assert rows.loc["calibrated", "rank_correlation"] == pytest.approx(np.sqrt(3) / 2)
    assert rows.loc["two streams", "fit_set_error"] == 0.0
    assert rows.loc["two streams", "rank_correlation"] == pytest.approx(1.0)
    assert (rows["step_error_median"] == 0.0).all()


def test_refuses_a_missing_validation_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validation_what_if.py"), str(tmp_path / "none"),
                        "--csv", str(tmp_path / "out.csv")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "results.csv" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out.csv").exists()
