"""The cross-family comparison on hand-built inputs: one measurement of the work, exact costs, the winner."""

from dataclasses import replace

import numpy as np
import pytest

from conftest import make_cluster
from trinity.data_parallel import DataParallelWork, step_cost
from trinity.families import FamilyEntry, data_parallel_entries, op_placement_entries, op_scale, winner
from trinity.graph import Edge, Op, OpGraph
from trinity.profile.layers import Layer, LayerProfile
from trinity.step_cost import StepCost


def profile():
    layers = (Layer("embed", 100.0, 200.0, 4000, 800, 1600), Layer("block", 300.0, 600.0, 8000, 800, 3200))
    return LayerProfile(model="toy", batch=4, layers=layers, input_bytes=64)


def chain():
    return OpGraph([Op("a", "MatMul", 200.0, output_bytes=(10,)), Op("b", "MatMul", 400.0, output_bytes=(10,))],
                   [Edge("a", "b")])


def test_op_times_are_scaled_to_the_layer_profiles_total():
    assert op_scale(chain(), profile()) == pytest.approx(1200.0 / 600.0)
    (single,) = op_placement_entries(chain(), make_cluster(2), ["single"], scale=2.0)
    assert single.cost.step_time_us == pytest.approx(1200.0) and single.family == "op placement"


def test_data_parallel_work_is_the_profile_per_sample():
    work = DataParallelWork.from_layers(profile())
    assert work.us_per_sample == 300.0 and work.param_bytes == 12000.0 and work.batch == 4
    assert work.activation_bytes_per_sample == 1200.0 and work.update_us == 0.0
    entries = data_parallel_entries(profile(), make_cluster(2), ["ddp", "daso"])
    assert [e.method for e in entries] == ["ddp", "daso"] and all(e.cost.fits for e in entries)
    # on a cluster run for real, costed over the epochs the runs time (DASO's blocking last batch included)
    timed = data_parallel_entries(profile(), make_cluster(2), ["daso"], epoch_steps=10)[0].cost
    assert timed.step_time_us == step_cost("daso", make_cluster(2), work, epoch_steps=10).step_time_us
    assert timed.step_time_us > entries[1].cost.step_time_us  # the steady state's, without the blocking average


def cost(step_us, memory=1.0, capacity=2.0):
    z = np.zeros(2)
    return StepCost(step_us, 0.0, z, z, np.full(2, memory), np.full(2, capacity), 1.0)


def test_winner_is_the_fastest_that_fits():
    entries = [FamilyEntry("pipeline", "tapp", cost(90.0, memory=3.0)), FamilyEntry("op placement", "m-etf", cost(120.0)),
               FamilyEntry("data parallel", "ddp", cost(100.0))]
    assert winner(entries).method == "ddp"  # tapp is faster but does not fit
    assert winner(entries[:1]) is None


def test_step_cost_round_trips_through_json():
    c = StepCost(5.0, 1.0, np.array([1.0, 2.0]), np.array([2.0, 1.0]), np.array([3.0, 4.0]), np.array([5.0, 5.0]), 2.0)
    back = StepCost.from_dict(c.to_dict())
    assert back.summary() == c.summary() and np.array_equal(back.memory_bytes, c.memory_bytes)
    assert c.comm_share == 0.2 and c.peak_comm_bytes == 3.0 and c.total_comm_bytes == 3.0


def test_op_placement_is_costed_by_device_speed_like_the_layer_profile():
    """Devices of the profiled kind at half speed take twice the measured time, kind times notwithstanding."""
    g = chain()
    g = OpGraph([replace(op, compute_us_by_kind={"k": 1.0}) for op in g.ops], g.edges, name=g.name)
    (single,) = op_placement_entries(g, make_cluster(2, speeds=[0.5, 0.5]), ["single"], scale=2.0)
    assert single.cost.step_time_us == pytest.approx(2400.0)


def test_family_errors_and_winner_count_on_a_hand_built_table():
    import pandas as pd

    from trinity.report.families import errors
    t = pd.DataFrame([
        {"model": "m", "cluster": "c", "family": "pipeline", "method": "tapp", "step_time_ms": 90.0,
         "real_step_ms": 100.0, "winner": True, "measured_winner": True},
        {"model": "m", "cluster": "c", "family": "data parallel", "method": "ddp", "step_time_ms": 150.0,
         "real_step_ms": 120.0, "winner": False, "measured_winner": False},
        {"model": "m", "cluster": "d", "family": "data parallel", "method": "ddp", "step_time_ms": 50.0,
         "real_step_ms": 100.0, "winner": True, "measured_winner": False},
        {"model": "m", "cluster": "d", "family": "pipeline", "method": "tapp", "step_time_ms": 80.0,
         "real_step_ms": 80.0, "winner": False, "measured_winner": True},
        {"model": "m", "cluster": "d", "family": "op placement", "method": "metis", "step_time_ms": 10.0,
         "real_step_ms": None, "winner": False, "measured_winner": None}])
    e = errors(t).set_index("family")
    assert e.loc["pipeline", "median_abs_error"] == pytest.approx(0.05)  # 10% and 0%
    assert e.loc["data parallel", "median_abs_error"] == pytest.approx(0.375)  # 25% and 50%
    assert e.loc["data parallel", "max_abs_error"] == pytest.approx(0.5)
    assert e.loc["all (winner predicted)", "cases"] == 2 and e.loc["all (winner predicted)", "winner_predicted"] == 1


def test_measured_lists_each_run_with_its_error_and_computation_term(tmp_path):
    from trinity.fileio import write_json
    from trinity.report.families import measured

    runs = {"h-hps": {"family": "data parallel", "method": "hps", "real_step_ms": 50.0, "sim_step_ms": 40.0,
                      "sim_compute_ms": 20.0, "real_compute_ms": 30.0},
            "h-tapp": {"family": "pipeline", "method": "tapp", "real_step_ms": 40.0, "sim_step_ms": 44.0}}
    for name, doc in runs.items():
        write_json(tmp_path / "measure" / "m" / f"{name}.metrics.json", {"model": "m", "cluster": "h", **doc})
    table = measured(tmp_path)
    assert table["method"].tolist() == ["tapp", "hps"]  # by measured step time
    assert table["error"].tolist() == [0.1, -0.2]
    assert table.loc[1, "real_compute_ms"] == 30.0 and table.loc[1, "sim_compute_ms"] == 20.0
    assert table.loc[0, ["sim_compute_ms", "real_compute_ms"]].isna().all()
