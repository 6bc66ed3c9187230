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


def test_repredicted_recovers_the_work_from_ddp_and_ps_and_costs_the_runs_again(tmp_path):
    import yaml

    from trinity.cluster import cluster_from_dict
    from trinity.data_parallel import DataParallelError
    from trinity.fileio import write_json
    from trinity.report.families import repredicted

    doc = {"name": "h", "devices": [{"name": f"d{i}", "speed": s, "memory_GB": 1, "node": f"n{i // 2}"}
                                    for i, s in enumerate((1.0, 1.0, 0.5, 0.5))],
           "default_link": {"bandwidth_GBps": 0.01, "latency_us": 100}}
    flat = {**doc, "name": "e", "devices": [{**d, "speed": 1.0} for d in doc["devices"]]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "clusters": {"h": doc, "e": flat}, "models": {"m": {"batch": 8}},
        "pipeline_parallel": {"measure": {"steps": 10}}}))
    work = DataParallelWork(us_per_sample=100.0, param_bytes=4000.0, batch=8, update_us=30.0)
    for name, d in (("h", doc), ("e", flat)):
        cluster = cluster_from_dict(d)
        for method, real in (("ddp", 2000.0), ("ps", 3000.0), ("daso", 1000.0)):
            cost = step_cost(method, cluster, work)  # what the measure stage committed, as the model then was
            write_json(tmp_path / "results" / "measure" / "m" / f"{name}-{method}.metrics.json", {
                "model": "m", "cluster": name, "family": "data parallel", "method": method,
                "real_step_ms": real / 1e3, "sim_step_ms": cost.step_time_us / 1e3, "sim_comm_share": cost.comm_share,
                "sim_sent_MB_per_step": float(cost.sent_bytes.sum()) / 1e6})
    table = repredicted(tmp_path / "results", ["h"], tmp_path / "params.yaml").set_index("method")
    h = cluster_from_dict(doc)
    for method in ("ddp", "ps", "daso"):  # the work recovered exactly: today's model on it, epochs of 10 steps
        assert table.loc[method, "new_sim_step_ms"] == pytest.approx(
            step_cost(method, h, work, epoch_steps=10).step_time_us / 1e3, abs=1e-4)
    assert table.loc["daso", "new_error"] == pytest.approx((table.loc["daso", "new_sim_step_ms"] - 1.0) / 1.0, abs=1e-4)
    with pytest.raises(DataParallelError, match="clusters"):  # equal speeds: computation and update inseparable
        repredicted(tmp_path / "results", ["e"], tmp_path / "params.yaml")
