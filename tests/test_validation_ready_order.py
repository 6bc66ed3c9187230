"""benchmarks/validation_ready_order.py: today's fit rule under each ready order, on a hand-built validation."""

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation


def test_the_order_that_made_the_times_is_chosen_and_judges_the_held_out_exactly(tmp_path):
    """Times made by the oldest runnable op first (fifo), 4 streams, control edges sent, the workers' held sends
    (today's rule sets them; no CPU share, so only `send_on_request` moves a time): refitted under each order,
    fifo alone fits the fit set exactly, so a calibration fitting the order would choose it, and its held-out
    figures are exact (median 0, rank 1); the two stacks do not fit exactly."""
    ready_order = benchmark_script("validation_ready_order")
    model_made_validation(tmp_path / "model", link_streams=4, control_transfers=True, ready_order="fifo",
                          send_on_request=True, sends_last=True)
    out = tmp_path / "orders.csv"
    ready_order.main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out).set_index("ready_order")
    assert list(table.index) == ["lifo-arrivals-last", "lifo", "fifo"]
    assert (table["model"] == "model").all() and (table["run"] == 1).all() and (table["batch"] == 8).all()
    assert table["chosen"].tolist() == [False, False, True]
    assert table.loc["fifo", ["fit_error", "link_streams"]].tolist() == [pytest.approx(0.0, abs=1e-12), 4]
    assert (table.loc[["lifo-arrivals-last", "lifo"], "fit_error"] > 0).all()
    assert table.loc["fifo", "step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc["fifo", "rank_correlation"] == pytest.approx(1.0)
