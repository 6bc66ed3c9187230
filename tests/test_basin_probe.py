"""benchmarks/basin_probe.py: one device against the bisection's blocks, the basin the higher reward picks."""

import pytest

from conftest import benchmark_script
from trinity.cluster import load_cluster
from trinity.features import op_features
from trinity.graph import Edge, Op, OpGraph
from trinity.reward import MDPEConfig, mdpe_reward
from trinity.sim import Simulator


def chains(n_chains: int, length: int, edge_bytes: int) -> OpGraph:
    ops = [Op(f"c{c}o{i}", "MatMul", 100.0, output_bytes=(edge_bytes,)) for c in range(n_chains) for i in range(length)]
    edges = [Edge(f"c{c}o{i}", f"c{c}o{i + 1}", 0) for c in range(n_chains) for i in range(length - 1)]
    return OpGraph(ops, edges, name=f"{n_chains}x{length}")


@pytest.mark.parametrize("op_costs", ["profile", "cluster"])
@pytest.mark.parametrize("n_chains, length, expected", [(2, 4, "balanced"), (1, 8, "gathered")])
def test_the_probe_simulates_both_starts_and_takes_the_higher_reward(n_chains, length, expected, op_costs):
    """Two independent chains of four ops, 4 parts on 2 devices: the blocks put one chain on each device (half
    the step, nothing sent), so balanced; one chain of eight: the blocks cut it in the middle (no overlap, one
    100 kB transfer more), so gathered. Either way the blocks are a contiguous half per device."""
    probe = benchmark_script("basin_probe").probe
    graph, cluster = chains(n_chains, length, 100_000), load_cluster("p100x2")
    row = probe(graph, op_features(graph, embedding_dim=2), cluster, MDPEConfig(), 4, op_costs)
    sim = Simulator(graph, cluster)
    single, halves = sim.simulate([0] * 8), sim.simulate([0] * 4 + [1] * 4)
    assert row["single_ms"] == pytest.approx(single.step_time_us / 1e3)
    assert row["blocks_ms"] == pytest.approx(halves.step_time_us / 1e3)
    assert row["single_reward"] == pytest.approx(mdpe_reward(single, MDPEConfig()))
    assert row["blocks_reward"] == pytest.approx(mdpe_reward(halves, MDPEConfig()))
    assert row["blocks_busiest_share"] == pytest.approx(0.5) and row["probe"] == expected
