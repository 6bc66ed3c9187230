"""benchmarks/validation_transfer_terms.py: today's fit rule under each setting of two transfer terms, on a
hand-built validation."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation

from trinity.errors import TrinityError
from trinity.fileio import read_yaml


def test_the_view_sets_the_terms_in_every_cluster_file_and_links_the_rest(tmp_path):
    terms = benchmark_script("validation_transfer_terms")
    model_made_validation(tmp_path / "model")
    view = terms.with_terms(tmp_path / "model", tmp_path / "view", {"latency_overlaps": True, "transfer_cpu_us": 50.0})
    own = read_yaml(tmp_path / "model" / "calibration" / "cluster.yaml")
    assert read_yaml(view / "calibration" / "cluster.yaml") == {**own, "latency_overlaps": True, "transfer_cpu_us": 50.0}
    assert "latency_overlaps" not in own  # the validation's own file is left as it was
    assert (view / "results.csv").is_symlink() and (view / "calibration" / "graph.json.gz").is_symlink()
    assert (view / "results.csv").read_bytes() == (tmp_path / "model" / "results.csv").read_bytes()


def test_the_terms_that_made_the_times_are_chosen_and_judge_the_held_out_exactly(tmp_path):
    """Times made with overlapping latencies, a fixed 60 us per transfer and the CPU share of it all on the
    sender: refitted under each setting, the one that made them fits the fit set exactly, so a calibration
    fitting the terms would choose it, and its held-out figures are exact (median 0, rank 1); without the fixed
    cost no fit is exact. On this small graph serial latencies over several streams overlap as much."""
    terms = benchmark_script("validation_transfer_terms")
    model_made_validation(tmp_path / "model", send_cpu_share=1.0, cpu_share_of="bytes", control_transfers=True,
                          ready_order="lifo-arrivals-last", latency_overlaps=True, transfer_cpu_us=60.0,
                          send_on_request=True, sends_last=True)  # today's rule holds the sends
    out = tmp_path / "terms.csv"
    terms.main([str(tmp_path / "model"), "--settings", "false:0", "true:0", "true:60", "false:60", "--csv", str(out)])
    table = pd.read_csv(out)
    assert table[["latency_overlaps", "transfer_cpu_us"]].values.tolist() == [
        [False, 0.0], [True, 0.0], [True, 60.0], [False, 60.0]]
    assert (table["model"] == "model").all() and (table["run"] == 1).all() and (table["batch"] == 8).all()
    assert table["chosen"].tolist() == [False, False, True, True]
    made = table.iloc[2]
    assert made["fit_error"] == pytest.approx(0.0, abs=1e-12) and made["send_cpu_share"] == 1.0
    assert (table.iloc[:2]["fit_error"] > 0.01).all() and table.iloc[3]["link_streams"] > 1
    assert made["step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert made["rank_correlation"] == pytest.approx(1.0)


@pytest.mark.parametrize("text", ["yes:100", "true", "true:", "true:-5", "false:nan", "true:inf", "1:0"])
def test_a_malformed_setting_is_refused_naming_the_option(text):
    terms = benchmark_script("validation_transfer_terms")
    with pytest.raises(TrinityError, match=r"^--settings: .* is not OVERLAPS:US"):
        terms.parse_setting(text)


def test_settings_parse_both_terms():
    terms = benchmark_script("validation_transfer_terms")
    assert [terms.parse_setting(t) for t in ("TRUE:100", "false:0", "true:12.5")] == [
        (True, 100.0), (False, 0.0), (True, 12.5)]


@pytest.mark.parametrize("args, named", [(["--settings", "true:x"], "--settings"), ([], "results.csv")])
def test_bad_input_is_one_line_before_any_refit(tmp_path, args, named):
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "validation_transfer_terms.py"),
                        str(tmp_path / "none"), *args, "--csv", str(tmp_path / "out.csv")],
                       capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.csv").exists()
