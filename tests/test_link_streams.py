"""A cluster's ``link_streams``: transfers a sender carries at once, exact on a hand-built graph, and
its default (1) leaving every simulation as it was."""

import json
from pathlib import Path

import numpy as np
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import ClusterError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import layered_dag, random_dag
from trinity.placers import place
from trinity.sim import Simulator, simulate_reference

from conftest import make_cluster


def streams_cluster(n, k, **terms):
    """make_cluster's links (2 us + bytes / 1000 B/us) with ``link_streams`` k."""
    return cluster_from_dict({**make_cluster(n).to_dict(), **terms, "link_streams": k})


def both(graph, cluster, placement):
    fast = Simulator(graph, cluster).simulate(np.array(placement), trace=True)
    ref = simulate_reference(graph, cluster, np.array(placement))
    return fast, ref


# a (10 us) on d0 sends 2000 B to b (5 us) and then 1000 B to c (1 us), both on d1: 4 us and 3 us.
FAN_OUT = OpGraph([Op("a", "A", 10.0, output_bytes=(2000, 1000)), Op("b", "B", 5.0), Op("c", "C", 1.0)],
                  [Edge("a", "b", 0), Edge("a", "c", 1)])


def test_one_stream_sends_one_tensor_at_a_time():
    # 2000 B [10, 14], then 1000 B [14, 17]; b [14, 19]; c waits for d1: [19, 20]
    for res in both(FAN_OUT, streams_cluster(2, 1), [0, 1, 1]):
        assert list(res.transfers[:, 5]) == [10.0, 14.0] and list(res.transfers[:, 6]) == [14.0, 17.0]
        assert list(res.op_start) == [0.0, 14.0, 19.0]
        assert res.step_time_us == 20.0


def test_two_streams_overlap_two_transfers():
    # both leave at 10: 1000 B arrives at 13, c runs [13, 14]; 2000 B at 14, b runs [14, 19]
    for res in both(FAN_OUT, streams_cluster(2, 2), [0, 1, 1]):
        assert [list(x) for x in res.transfers] == [[0, 0, 0, 1, 2000, 10.0, 14.0], [0, 1, 0, 1, 1000, 10.0, 13.0]]
        assert list(res.op_start) == [0.0, 14.0, 13.0]
        assert res.step_time_us == 19.0
        assert list(res.sent_bytes) == [3000, 0]  # the bytes do not change
    for res in both(FAN_OUT, streams_cluster(2, 3), [0, 1, 1]):  # more streams than transfers: the same
        assert res.step_time_us == 19.0


def test_streams_overlap_the_senders_share_too():
    # share 0.5: the sender's processor serialises 2 us then 1.5 us ([10, 12], [12, 13.5]); each wire
    # part starts as its share ends, in parallel with two streams: 2000 B [12, 14], 1000 B [13.5, 15]
    for res in both(FAN_OUT, streams_cluster(2, 2, send_cpu_share=0.5), [0, 1, 1]):
        assert list(res.transfers[:, 6]) == [14.0, 15.0]
        assert list(res.op_start) == [0.0, 14.0, 19.0]
        assert res.step_time_us == 20.0


def test_link_streams_default_round_trip_and_refusals():
    c = make_cluster(2)
    assert c.link_streams == 1 and "link_streams" not in c.to_dict()
    k = streams_cluster(3, 4)
    assert cluster_from_dict(k.to_dict()).link_streams == 4 and k.subset([2, 0]).link_streams == 4
    for bad in (0, -1, 1.5, True, "2", 2000):
        with pytest.raises(ClusterError, match="link_streams"):
            streams_cluster(2, bad)


@pytest.mark.parametrize("seed", range(40))
def test_fast_equals_reference_with_streams(seed):
    rng = np.random.default_rng(seed)
    graph = random_dag(int(rng.integers(2, 25)), float(rng.uniform(0.05, 0.5)), seed=seed)
    terms = ({}, {"send_cpu_share": 0.4}, {"corun_slowdown": 0.3, "step_sync_us": 1.5})[seed % 3]
    cluster = streams_cluster(2 + seed % 3, 2 + seed % 2, **terms)
    fast, ref = both(graph, cluster, place("random", graph, cluster, seed=seed).placement)
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)


def test_fast_equals_reference_with_streams_past_the_heap_threshold():
    graph = layered_dag(300, 500, seed=5, colocated_fraction=0.0)
    cluster = cluster_from_dict({**make_cluster(60, memory_GB=100.0).to_dict(), "link_streams": 3,
                                 "corun_slowdown": 0.05, "send_cpu_share": 0.3})
    fast, ref = both(graph, cluster, np.random.default_rng(5).integers(0, 60, graph.n_ops))
    assert fast.step_time_us == ref.step_time_us > 0
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)


def test_one_stream_written_out_is_todays_simulator():
    """``link_streams: 1`` in a file and no field at all simulate bit for bit alike."""
    graph = layered_dag(200, 350, seed=2, colocated_fraction=0.0)
    plain = make_cluster(3, memory_GB=100.0)
    explicit = cluster_from_dict({**plain.to_dict(), "link_streams": 1})
    p = np.random.default_rng(2).integers(0, 3, graph.n_ops)
    a, b = Simulator(graph, plain).simulate(p, trace=True), Simulator(graph, explicit).simulate(p, trace=True)
    assert a.step_time_us == b.step_time_us
    np.testing.assert_array_equal(a.op_end, b.op_end)
    np.testing.assert_array_equal(a.transfers, b.transfers)


ROOT = Path(__file__).resolve().parents[1]
COMMITTED = "results/search/inception_v3/p100x4-trinity-s0"


def test_committed_search_strategy_simulates_as_committed():
    """The search's recorded step time (metrics.json, in git) is what the simulator gives its strategy now."""
    from trinity.cluster import load_cluster
    from trinity.graph import load_graph
    from trinity.placement import Strategy

    strategy, graph_file = ROOT / COMMITTED / "strategy.json", ROOT / "data/inception_v3/profile/graph.json.gz"
    if not (strategy.exists() and graph_file.exists()):
        pytest.skip("the search's DVC outputs are not checked out here")
    metrics = json.loads((ROOT / f"{COMMITTED}.metrics.json").read_text())
    graph, cluster = load_graph(graph_file), load_cluster(metrics["cluster"])
    placement = Strategy.load(strategy).to_indices(graph)
    assert Simulator(graph, cluster).simulate(placement).step_time_us / 1e3 == metrics["step_time_ms"]


def test_bound_stays_below_the_simulator_with_streams():
    from trinity.bound import step_time_bound

    cluster = streams_cluster(2, 2)
    bound = step_time_bound(FAN_OUT, cluster, time_limit_s=10.0).bound_us
    best = min(Simulator(FAN_OUT, cluster).simulate(np.array(p)).step_time_us
               for p in ([0, 0, 0], [0, 1, 1], [0, 1, 0], [0, 0, 1], [1, 1, 1], [1, 0, 0]))
    assert bound <= best
