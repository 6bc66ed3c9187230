"""benchmarks/families_repeat.py (which runs it repeats, the table of both rounds, its refusals),
benchmarks/dp_compute_term.py's refusal and benchmarks/wakeup_latency.py (a tiny run, its refusals)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trinity.fileio import write_json

from conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return benchmark_script("families_repeat")


def test_jobs_are_the_measure_stages_matrices():
    params = {"run": {"pipeline_parallel": {"models": ["m"], "methods": ["tapp", "dp"]},
                      "data_parallel": {"methods": ["ddp"]}},
              "pipeline_parallel": {"measure": {"clusters": ["a", "b"]}}}
    assert _script().jobs(params) == [("m", "a", "tapp", True), ("m", "a", "dp", True), ("m", "a", "ddp", False),
                                      ("m", "b", "tapp", True), ("m", "b", "dp", True), ("m", "b", "ddp", False)]


def test_table_puts_both_rounds_side_by_side_with_their_spread(tmp_path):
    def run(root, method, real, sim=100.0):
        write_json(root / "measure" / "m" / f"a-{method}.metrics.json", {
            "model": "m", "cluster": "a", "family": "pipeline", "method": method, "real_step_ms": real,
            "sim_step_ms": sim})
    run(tmp_path / "first", "tapp", 100.0)
    run(tmp_path / "second", "tapp", 125.0)
    run(tmp_path / "first", "even", 80.0)  # not repeated: left out
    row = _script().table(tmp_path / "first", tmp_path / "second").iloc[0]
    assert row["method"] == "tapp" and row["real_step_ms_repeat"] == 125.0
    assert row["spread"] == pytest.approx(0.2222, abs=1e-4)  # 25 / 112.5
    assert row["error"] == 0.0 and row["error_repeat"] == pytest.approx(-0.2)


def test_a_missing_plan_is_one_line_naming_the_command(tmp_path):
    doc = {"run": {"pipeline_parallel": {"models": ["m"], "methods": ["tapp"]}, "data_parallel": {"methods": []}},
           "pipeline_parallel": {"measure": {"clusters": ["a"]}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "families_repeat.py"), "--results", "results",
                           "--work", "work"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --results: results/partition/m/a-tapp-s0 is not here (a DVC output): run `dvc repro partition` first"]


def test_dp_compute_term_refuses_a_missing_layer_profile_in_one_line(tmp_path):
    doc = {"paths": {"data": "data", "results": "results"},
           "clusters": {"a": {"name": "a", "devices": [{"name": "d0", "speed": 1.0, "memory_GB": 1}]}},
           "run": {"pipeline_parallel": {"models": ["m"]}, "data_parallel": {"methods": ["ddp"]}},
           "pipeline_parallel": {"measure": {"clusters": ["a"], "steps": 10}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dp_compute_term.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: layers: data/m/layers/profile.json is not here (a DVC output): run `dvc repro layers` first"]


@pytest.mark.parametrize("args, line", [
    (["--sizes", "4096", "6"],
     "error: --sizes: must be whole float32 messages, multiples of 4 bytes >= 4, got [4096, 6]"),
    (["--rounds", "3"], "error: --rounds: must be >= 10, got 3")])
def test_wakeup_latency_refuses_bad_arguments_in_one_line(tmp_path, args, line):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wakeup_latency.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [line]


def test_wakeup_latency_times_every_size_beside_0_1_2_busy_processes(tmp_path):
    csv = tmp_path / "wakeup.csv"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wakeup_latency.py"), "--sizes", "4096",
                           "--rounds", "10", "--csv", str(csv)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    table = pd.read_csv(csv)
    assert table["busy_on_core"].tolist() == [0, 1, 2] and (table["bytes"] == 4096).all()
    assert (table["round_trip_ms"] > 0).all() and (table["round_trip_p90_ms"] >= table["round_trip_ms"]).all()
