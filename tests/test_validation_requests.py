"""benchmarks/validation_requests.py: today's fit rule with requests issued in no time against the same rule with
the cost of issuing one (`request_cpu_us`) fitted, on a hand-built validation."""

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation

from trinity.errors import TrinityError

TODAY = dict(link_streams=2, control_transfers=True, ready_order="lifo-arrivals-last", send_cpu_share=0.5,
             cpu_share_of="bytes", send_on_request=True, sends_last=True)


def test_a_request_cost_that_made_the_times_is_found_again_and_judges_the_held_out_exactly(tmp_path):
    """Times made by today's semantics with each request costing its receiver 20 us: refitted with the cost tried,
    the fit finds 20 and fits the fit set exactly, and its held-out figures are exact (median 0, rank 1); with
    requests free it cannot fit them."""
    requests = benchmark_script("validation_requests")
    model_made_validation(tmp_path / "model", request_cpu_us=20.0, **TODAY)
    out = tmp_path / "requests.csv"
    requests.main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out).set_index("requests")
    assert list(table.index) == ["free", "fitted"] and (table["batch"] == 8).all()
    assert table["chosen"].tolist() == [False, True]
    assert table.loc["fitted", ["request_cpu_us", "link_streams", "send_cpu_share"]].tolist() == [20.0, 2, 0.5]
    assert table.loc["fitted", "fit_error"] == pytest.approx(0.0, abs=1e-12) and table.loc["free", "fit_error"] > 0
    assert table.loc["free", "request_cpu_us"] == 0.0
    assert table.loc["fitted", "step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc["fitted", "rank_correlation"] == pytest.approx(1.0)


def test_free_requests_are_kept_where_they_made_the_times(tmp_path):
    """Times made with requests free: both rules fit them exactly, and the tie goes to no cost."""
    model_made_validation(tmp_path / "model", **TODAY)
    out = tmp_path / "requests.csv"
    benchmark_script("validation_requests").main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out).set_index("requests")
    assert table["request_cpu_us"].tolist() == [0.0, 0.0] and table["chosen"].tolist() == [True, True]
    assert table["fit_error"].tolist() == pytest.approx([0.0, 0.0], abs=1e-12)


def test_a_folder_that_is_no_validation_is_refused(tmp_path):
    with pytest.raises(TrinityError, match="nowhere: results.csv: not a validation folder"):
        benchmark_script("validation_requests").main([str(tmp_path / "nowhere")])
