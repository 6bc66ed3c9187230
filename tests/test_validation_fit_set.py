"""benchmarks/validation_fit_set.py: the transfer model fitted with and without some held-out splits, judged on
the others, on hand-built validations."""

import pandas as pd
import pytest

from conftest import benchmark_script
from test_resimulate import model_made_validation
from trinity.errors import TrinityError


def test_folds_deal_the_held_out_splits_by_measured_time_and_judging_counts_one_fold():
    fit_set = benchmark_script("validation_fit_set")
    table = pd.DataFrame({
        "strategy": ["a", "b", "c", "d", "e", "metis", "gathered", "lost"],
        "real_step_ms": [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0, float("nan")],
        "calibration_set": [False, False, False, False, False, True, False, False],
        "real_crossed_MB": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0],
        "sim_step_ms": [5.5, 1.1, 4.4, 2.2, 3.3, 9.0, 7.0, 1.0],
    })
    table["step_error"] = (table["sim_step_ms"] - table["real_step_ms"]) / table["real_step_ms"]
    table["comm_error"], table["sim_comm_MB"], table["overridden"] = 0.0, table["real_crossed_MB"], 0
    # by measured time b 1, d 2, e 3, c 4, a 5; the fit placer, the unsplit and the unmeasured one are not dealt
    assert fit_set.folds(table) == [["b", "e", "a"], ["d", "c"]]
    judged = fit_set.judged_on(table, ["b", "e", "a"])
    assert judged["judged"] == 3 and judged["median"] == pytest.approx(0.1) and judged["rank"] == pytest.approx(1.0)


def test_each_fold_is_judged_by_fits_with_and_without_the_other_folds_splits(tmp_path):
    """Every time made by one model in today's grid (4 streams, shares of the bytes, control edges sent, a
    received tensor's readers last): the 4 held-out splits are dealt into folds of 2; fitted to the placers
    alone or with the other fold's 2 splits, the fit finds the model exactly and judges each fold exactly."""
    fit_set = benchmark_script("validation_fit_set")
    model_made_validation(tmp_path / "model", link_streams=4, control_transfers=True,
                          ready_order="lifo-arrivals-last", cpu_share_of="bytes")
    out = tmp_path / "fit_set.csv"
    fit_set.main([str(tmp_path / "model"), "--csv", str(out)])
    table = pd.read_csv(out)
    assert len(table) == 4  # 1 run x 1 batch x 2 folds x 2 fit sets
    assert table["fitted_splits"].tolist() == [0, 2, 0, 2] and table["judged"].tolist() == [2, 2, 2, 2]
    # the times were made by a model in today's grid: every fit finds it, exactly, and judges exactly
    assert table["fit_error"].abs().max() == pytest.approx(0.0, abs=1e-12)
    assert table["median"].abs().max() == pytest.approx(0.0, abs=1e-12)
    assert (table["link_streams"] == 4).all()
    with pytest.raises(SystemExit):  # a grid past 5 is refused by argparse (exit status 2)
        fit_set.main([str(tmp_path / "model"), "--max-send-share", "9"])


def test_held_sends_fits_under_the_workers_held_sends(tmp_path):
    """Times made with the workers' held sends (send_on_request, sends_last; a send share of 0.5): fitted with
    --held-sends, every fit finds the model exactly; without, the fits miss."""
    fit_set = benchmark_script("validation_fit_set")
    model_made_validation(tmp_path / "model", link_streams=2, control_transfers=True, ready_order="lifo-arrivals-last",
                          cpu_share_of="bytes", send_cpu_share=0.5, send_on_request=True, sends_last=True)
    held, today = tmp_path / "held.csv", tmp_path / "today.csv"
    fit_set.main([str(tmp_path / "model"), "--held-sends", "--csv", str(held)])
    fit_set.main([str(tmp_path / "model"), "--csv", str(today)])
    held, today = pd.read_csv(held), pd.read_csv(today)
    assert held["fit_error"].abs().max() == pytest.approx(0.0, abs=1e-12)
    assert held["median"].abs().max() == pytest.approx(0.0, abs=1e-12) and (held["send_cpu_share"] == 0.5).all()
    assert (today["fit_error"] > 0).all()


def test_also_fit_adds_the_validations_rows_of_those_strategies_to_the_fit_set(tmp_path):
    """Every time made by a model in today's grid, then two held-out strategies measured 1.5x slower: the fit
    placers alone are fitted exactly; with those two in the fit set they are not. The calibration's own
    measurements have no rows of other strategies: asking for them is refused, naming the field."""
    from trinity.runtime.resimulate import FIT_RULES, refit_run

    model_made_validation(tmp_path, link_streams=4, control_transfers=True, ready_order="lifo-arrivals-last",
                          cpu_share_of="bytes", send_on_request=True, sends_last=True)  # today's held sends
    table = pd.read_csv(tmp_path / "results.csv")
    table.loc[table["strategy"].isin(["random0", "random1"]), "real_step_ms"] *= 1.5
    table.to_csv(tmp_path / "results.csv", index=False)
    placers, _ = refit_run(tmp_path, FIT_RULES[-1], "validation")
    assert placers.link_streams == 4 and placers.error == pytest.approx(0.0, abs=1e-12)
    widened, _ = refit_run(tmp_path, FIT_RULES[-1], "validation", also_fit=("random0", "random1"))
    assert widened.error > 0.01
    with pytest.raises(TrinityError, match="also_fit"):
        refit_run(tmp_path, FIT_RULES[-1], "calibration", also_fit=("random0",))
