"""benchmarks/regime_rescore.py: committed strategies scored again by one reward, and annealing from them."""

import pytest

from conftest import benchmark_script
from trinity.cluster import load_cluster
from trinity.graph import Edge, Op, OpGraph
from trinity.placement import Strategy
from trinity.reward import MDPEConfig, mdpe_reward
from trinity.sim import Simulator


def two_chains() -> OpGraph:
    ops = [Op(f"c{c}o{i}", "MatMul", 100.0, output_bytes=(1000,)) for c in range(2) for i in range(3)]
    edges = [Edge(f"c{c}o{i}", f"c{c}o{i + 1}", 0) for c in range(2) for i in range(2)]
    return OpGraph(ops, edges, name="two_chains")


def test_each_folder_is_scored_by_the_given_reward_and_trinity_and_metis_are_the_starts(tmp_path):
    """Three folders: a chain on each device (Trinity, seed 3), everything on one (Hierarchical from a warm start,
    seed 0: its method name holds a dash) and METIS's (one op across); the rows carry the simulator's figures and
    the MDPE reward, not whatever each method maximised, and the starts are Trinity's and METIS's."""
    rescore = benchmark_script("regime_rescore").rescore
    graph, cluster = two_chains(), load_cluster("p100x2")
    placements = {"trinity-s3": [0, 0, 0, 1, 1, 1], "hierarchical-warm-s0": [0] * 6, "metis-s0": [0, 0, 1, 1, 1, 1]}
    folders = []
    for name, placement in placements.items():
        folder = tmp_path / f"p100x2-{name}"
        folder.mkdir()
        Strategy.from_array(graph, cluster, placement).save(folder / "strategy.json")
        folders.append(folder)
    cfg = MDPEConfig(comm_tolerance_GB=1e-6, memory_tolerance_GB=1.0)  # a binding communication tolerance
    rows, starts = rescore("chains", graph, cluster, folders, lambda r: mdpe_reward(r, cfg))
    sim = Simulator(graph, cluster)
    assert [(r["method"], r["seed"]) for r in rows] == [("trinity", 3), ("hierarchical-warm", 0), ("metis", 0)]
    for row, placement in zip(rows, placements.values()):
        res = sim.simulate(placement)
        assert row["model"] == "chains" and row["cluster"] == "p100x2"
        assert row["step_time_ms"] == pytest.approx(res.step_time_us / 1e3)
        assert row["mdpe_reward"] == pytest.approx(mdpe_reward(res, cfg))
        assert row["peak_comm_MB"] == pytest.approx(res.peak_comm_bytes / 1e6)
    assert rows[0]["busiest_share"] == pytest.approx(0.5) and rows[1]["busiest_share"] == pytest.approx(1.0)
    assert rows[0]["peak_comm_MB"] == 0.0 < rows[2]["peak_comm_MB"]  # METIS's split sends one tensor
    assert sorted(starts) == [("metis", 0), ("trinity", 3)]


def test_annealing_from_a_start_never_ends_below_it(tmp_path):
    """From everything on one device, annealing's best is at least the start's reward (the start is seen first),
    and its gain is the step time it saved, in percent."""
    script = benchmark_script("regime_rescore")
    graph, cluster = two_chains(), load_cluster("p100x2")
    sim = Simulator(graph, cluster)
    start = [0] * 6
    res = sim.simulate(start)
    score = lambda r: mdpe_reward(r, MDPEConfig())  # noqa: E731
    rows = script.anneal_from("chains", graph, cluster, {("trinity", 0): (start, res)}, score, 50, {})
    assert [r["anneal_seed"] for r in rows] == [0, 1] and {r["start"] for r in rows} == {"trinity s0"}
    for row in rows:
        assert row["end_mdpe_reward"] >= row["start_mdpe_reward"] == pytest.approx(score(res))
        assert row["gain_pct"] == pytest.approx(100 * (1 - row["end_step_time_ms"] / row["start_step_time_ms"]))
