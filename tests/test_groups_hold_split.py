"""benchmarks/groups_hold_split.py: METIS's split read through the parts a search's groups start as."""

import pytest

from conftest import benchmark_script
from trinity.cluster import load_cluster
from trinity.features import op_features
from trinity.graph import Edge, Op, OpGraph
from trinity.sim import Simulator


def test_parts_inside_each_side_of_metis_split_give_its_step_time_exactly():
    """Two independent chains of four ops, 4 parts: METIS puts one chain on each device, every part (k-way or
    bisection) lies inside one chain, so reading the split through the parts, or cutting the bisection's
    parts into one run per device, gives METIS's own placement and step time."""
    split = benchmark_script("groups_hold_split")
    ops = [Op(f"{c}{i}", "MatMul", 100.0, output_bytes=(100_000,)) for c in "ab" for i in range(4)]
    edges = [Edge(f"{c}{i}", f"{c}{i + 1}", 0) for c in "ab" for i in range(3)]
    graph = OpGraph(ops, edges, name="two_chains")
    cluster = load_cluster("p100x2")
    rows = split.rows_for(graph, op_features(graph, embedding_dim=2), cluster, 4)
    assert [r["parts"] for r in rows] == ["kway", "bisection"]
    metis = Simulator(graph, cluster).simulate([0] * 4 + [1] * 4).step_time_us / 1e3
    for r in rows:
        assert r["metis_ms"] == pytest.approx(metis) and r["majority_ms"] == pytest.approx(metis)
        assert r["pure_share"] == 1.0
    assert rows[1]["blocks_ms"] == pytest.approx(metis)
