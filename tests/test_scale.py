"""Scale: the fast simulator against the reference on many devices, placers on 1,024 devices,
and the real-shaped training graph generator."""

import numpy as np
import pytest

from trinity.graph.synthetic import random_dag, training_graph
from trinity.placers import place
from trinity.sim import Simulator, simulate_reference

from conftest import make_cluster


@pytest.mark.parametrize("n_dev", [64, 128, 1024])
@pytest.mark.parametrize("seed", range(3))
def test_fast_equals_reference_on_random_graphs_with_many_devices(n_dev, seed):
    # Integer costs and power-of-two speeds keep times exact (ties included); ops go to a few dozen
    # of the devices, so they share devices and queue.
    graph = random_dag(60, 0.08, seed=seed)
    cluster = make_cluster(n_dev, memory_GB=100.0, speeds=[(1.0, 2.0, 0.5)[d % 3] for d in range(n_dev)])
    rng = np.random.default_rng(seed)
    used = rng.choice(n_dev, size=min(n_dev, 24), replace=False)
    placement = used[rng.integers(0, len(used), graph.arrays.n_groups)][graph.arrays.group]
    fast = Simulator(graph, cluster).simulate(placement, trace=True)
    ref = simulate_reference(graph, cluster, placement)
    assert fast.step_time_us == ref.step_time_us > 0
    for field in ("op_start", "op_end", "busy_us", "sent_bytes", "received_bytes", "peak_memory_bytes",
                  "transfers"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(ref, field), err_msg=field)


@pytest.mark.parametrize("name", ["single", "round-robin", "random", "expert", "m-topo", "metis", "m-etf",
                                  "m-sct"])
def test_placers_on_1024_devices_give_valid_placements(name):
    graph = training_graph(1_000, batch=2, seed=0)
    cluster = make_cluster(1024, memory_GB=10.0)
    p = place(name, graph, cluster, seed=0).placement  # place() checks groups and memory
    assert p.shape == (graph.n_ops,) and p.min() >= 0 and p.max() < 1024
    assert np.array_equal(p, place(name, graph, cluster, seed=0).placement)
    if name != "single":
        assert len(np.unique(p)) > 1


def test_training_graph_size_shape_and_determinism():
    graph = training_graph(5_000, seed=3)
    assert 5_000 <= graph.n_ops < 5_000 + 80  # whole blocks: at most one more than asked for
    assert len(graph.topological_order()) == graph.n_ops  # acyclic (OpGraph refuses cycles)
    types = {op.type for op in graph.ops}
    assert {"Conv2D", "Conv2DBackpropFilter", "ApplyAdam", "ConcatV2", "AddN"} <= types
    groups = graph.colocation_groups()
    assert groups and all(len(members) == 3 for members in groups.values())  # variable, read, update
    again = training_graph(5_000, seed=3)
    assert graph.digest() == again.digest()
    assert [op.compute_us for op in graph.ops] == [op.compute_us for op in again.ops]
    assert [op.compute_us for op in training_graph(5_000, seed=4).ops] != [op.compute_us for op in graph.ops]


def test_training_graph_reaches_100k_ops():
    graph = training_graph(100_000, seed=0)
    assert graph.n_ops >= 100_000
    assert graph.arrays.n_groups < graph.n_ops
