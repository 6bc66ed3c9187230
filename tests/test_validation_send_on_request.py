"""benchmarks/validation_send_on_request.py: today's fit rule with and without send_on_request, on a hand-built
validation."""

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation

from trinity.errors import TrinityError


def test_the_semantics_that_made_the_times_is_chosen_and_judges_the_held_out_exactly(tmp_path):
    """Times made by today's semantics (control edges sent, newest runnable op first, a received tensor's readers
    last, 2 streams) with send_on_request: refitted with and without it, only the term fits the fit set exactly, so
    a calibration fitting it would choose it, and its held-out figures are exact (median 0, rank 1)."""
    send_on_request = benchmark_script("validation_send_on_request")
    model_made_validation(tmp_path / "model", link_streams=2, control_transfers=True,
                          ready_order="lifo-arrivals-last", send_on_request=True)
    out = tmp_path / "semantics.csv"
    send_on_request.main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out).set_index("semantics")
    assert list(table.index) == ["today", "send_on_request"]
    assert (table["model"] == "model").all() and (table["run"] == 1).all() and (table["batch"] == 8).all()
    assert table["chosen"].tolist() == [False, True]
    assert table.loc["send_on_request", ["fit_error", "link_streams"]].tolist() == [pytest.approx(0.0, abs=1e-12), 2]
    assert table.loc["today", "fit_error"] > 0
    assert table.loc["send_on_request", "step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc["send_on_request", "rank_correlation"] == pytest.approx(1.0)


def test_a_folder_that_is_no_validation_is_refused(tmp_path):
    with pytest.raises(TrinityError, match="nowhere: results.csv: not a validation folder"):
        benchmark_script("validation_send_on_request").main([str(tmp_path / "nowhere")])
