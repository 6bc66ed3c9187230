"""benchmarks/validation_sends.py: today's fit rule (both of the workers' held sends, `send_on_request` and
`sends_last`) against the rule before it (neither) and each alone, on a hand-built validation."""

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation

from trinity.errors import TrinityError


def test_the_semantics_that_made_the_times_is_chosen_and_judges_the_held_out_exactly(tmp_path):
    """Times made by today's semantics (control edges sent, newest runnable op first, a received tensor's readers
    last, 2 streams, a send share of 0.5 of the bytes) with both held sends: refitted under each rule, only both
    terms fit the fit set exactly, so a calibration fitting them would choose them, and its held-out figures are
    exact (median 0, rank 1)."""
    sends = benchmark_script("validation_sends")
    model_made_validation(tmp_path / "model", link_streams=2, control_transfers=True, ready_order="lifo-arrivals-last",
                          send_cpu_share=0.5, cpu_share_of="bytes", send_on_request=True, sends_last=True)
    out = tmp_path / "sends.csv"
    sends.main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out).set_index("semantics")
    assert list(table.index) == ["neither", "send_on_request", "sends_last", "both"]
    assert (table["model"] == "model").all() and (table["run"] == 1).all() and (table["batch"] == 8).all()
    assert table["chosen"].tolist() == [False, False, False, True]
    assert table.loc["both", ["fit_error", "link_streams", "send_cpu_share"]].tolist() == [
        pytest.approx(0.0, abs=1e-12), 2, 0.5]
    assert (table.loc[["neither", "send_on_request", "sends_last"], "fit_error"] > 0).all()
    assert table.loc["both", "step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc["both", "rank_correlation"] == pytest.approx(1.0)


def test_a_folder_that_is_no_validation_is_refused(tmp_path):
    with pytest.raises(TrinityError, match="nowhere: results.csv: not a validation folder"):
        benchmark_script("validation_sends").main([str(tmp_path / "nowhere")])
