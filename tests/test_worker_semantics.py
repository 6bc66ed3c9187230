"""Two cluster terms of TensorFlow workers, exact on hand-built graphs, held to the reference simulator,
and off by default (the simulator as it was): ``control_transfers`` (a control edge between devices
moves an empty tensor) and ``ready_order: lifo`` (a device runs its newest runnable op first; with
``lifo-arrivals-last``, an op readied by an arriving tensor after all the device readied itself)."""

import numpy as np
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import ClusterError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import layered_dag
from trinity.sim import Simulator, simulate_reference

from conftest import make_cluster


def control_cluster(n, **terms):
    """make_cluster's links (2 us + bytes / 1000 B/us) with control edges sent as empty tensors."""
    return cluster_from_dict({**make_cluster(n, memory_GB=100.0).to_dict(), **terms, "control_transfers": True})


def both(graph, cluster, placement):
    fast = Simulator(graph, cluster).simulate(np.array(placement), trace=True)
    ref = simulate_reference(graph, cluster, np.array(placement))
    return fast, ref


# a (10 us) orders b (5 us) by a control edge and sends 1000 B to c (1 us).
ORDERED = OpGraph([Op("a", "A", 10.0, output_bytes=(1000,)), Op("b", "B", 5.0), Op("c", "C", 1.0)],
                  [Edge("a", "b", None), Edge("a", "c", 0)])


def test_a_free_control_edge_is_satisfied_when_its_producer_ends():
    # b [10, 15] at once; 1000 B [10, 13], c waits for d1: [15, 16]
    fast, ref = both(ORDERED, make_cluster(2, memory_GB=100.0), [0, 1, 1])
    for res in (fast, ref):
        assert list(res.op_start) == [0.0, 10.0, 15.0] and res.step_time_us == 16.0
        assert [list(x) for x in res.transfers] == [[0, 0, 0, 1, 1000, 10.0, 13.0]]


def test_a_control_edge_between_devices_moves_an_empty_tensor_first_in_edge_order():
    # the empty tensor [10, 12] (latency only), then 1000 B [12, 15]; b [12, 17], c waits for d1: [17, 18]
    for res in both(ORDERED, control_cluster(2), [0, 1, 1]):
        assert [list(x) for x in res.transfers] == [[0, -1, 0, 1, 0, 10.0, 12.0], [0, 0, 0, 1, 1000, 12.0, 15.0]]
        assert list(res.op_start) == [0.0, 12.0, 17.0] and res.step_time_us == 18.0
        assert list(res.sent_bytes) == [1000, 0]  # no bytes added
    for res in both(ORDERED, control_cluster(2), [0, 0, 0]):  # on one device nothing crosses
        assert res.step_time_us == 16.0 and len(res.transfers) == 0


def test_one_empty_tensor_per_consuming_device_and_the_senders_share():
    # a orders b and c on d1 and d on d2: one empty tensor to each device (2 us each, one stream:
    # [10, 12] to d1, [12, 14] to d2); with a send CPU share of 0.5 the sender's processor takes
    # 1 us of each first ([10, 11], [11, 12]), the wire the other 1 us: [11, 12] and [12, 13]
    graph = OpGraph([Op("a", "A", 10.0), Op("b", "B", 1.0), Op("c", "C", 1.0), Op("d", "D", 1.0)],
                    [Edge("a", "b", None), Edge("a", "c", None), Edge("a", "d", None)])
    for res in both(graph, control_cluster(3), [0, 1, 1, 2]):
        assert [list(x[2:]) for x in res.transfers] == [[0, 1, 0, 10.0, 12.0], [0, 2, 0, 12.0, 14.0]]
        assert list(res.op_start) == [0.0, 12.0, 13.0, 14.0] and res.step_time_us == 15.0
    for res in both(graph, control_cluster(3, send_cpu_share=0.5), [0, 1, 1, 2]):
        assert list(res.transfers[:, 6]) == [12.0, 13.0] and res.step_time_us == 14.0


def test_control_transfers_default_round_trip_and_refusals():
    plain = make_cluster(2)
    assert not plain.control_transfers and "control_transfers" not in plain.to_dict()
    on = control_cluster(3)
    assert cluster_from_dict(on.to_dict()).control_transfers and on.subset([2, 0]).control_transfers
    for bad in (1, "yes", 0.0):
        with pytest.raises(ClusterError, match="control_transfers"):
            cluster_from_dict({**plain.to_dict(), "control_transfers": bad})


def test_control_transfers_false_written_out_is_todays_simulator():
    graph = layered_dag(200, 350, seed=3, colocated_fraction=0.0, control_fraction=0.2)
    plain = make_cluster(3, memory_GB=100.0)
    explicit = cluster_from_dict({**plain.to_dict(), "control_transfers": False})
    p = np.random.default_rng(3).integers(0, 3, graph.n_ops)
    a, b = Simulator(graph, plain).simulate(p, trace=True), Simulator(graph, explicit).simulate(p, trace=True)
    assert a.step_time_us == b.step_time_us
    np.testing.assert_array_equal(a.transfers, b.transfers)
    slower = Simulator(graph, control_cluster(3)).simulate(p)
    assert slower.step_time_us > a.step_time_us  # 20% control edges, two in three of them crossing


@pytest.mark.parametrize("seed", range(24))
def test_fast_equals_reference_with_control_transfers(seed):
    rng = np.random.default_rng(seed)
    graph = layered_dag(int(rng.integers(5, 60)), int(rng.integers(8, 100)), seed=seed,
                        colocated_fraction=0.0, control_fraction=float(rng.uniform(0.1, 0.6)))
    terms = ({}, {"send_cpu_share": 0.4}, {"corun_slowdown": 0.3, "step_sync_us": 1.5},
             {"link_streams": 3, "send_cpu_share": 0.2})[seed % 4]
    cluster = control_cluster(2 + seed % 3, **terms)
    fast, ref = both(graph, cluster, rng.integers(0, cluster.n_devices, graph.n_ops))
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)


# r (1 us) readies a (2 us) and b (3 us), in edge order; a readies c (1 us).
BRANCHES = OpGraph([Op("r", "R", 1.0), Op("a", "A", 2.0), Op("b", "B", 3.0), Op("c", "C", 1.0)],
                   [Edge("r", "a", None), Edge("r", "b", None), Edge("a", "c", None)])


def test_lifo_takes_the_newest_runnable_op_first():
    fifo = make_cluster(1, memory_GB=100.0)
    lifo = cluster_from_dict({**fifo.to_dict(), "ready_order": "lifo"})
    for res in both(BRANCHES, fifo, [0, 0, 0, 0]):  # r, a, b, then c (readied after b): [0, 1, 3, 6]
        assert list(res.op_start) == [0.0, 1.0, 3.0, 6.0]
    for res in both(BRANCHES, lifo, [0, 0, 0, 0]):  # r, b (readied last), a, then c: [0, 4, 1, 6]
        assert list(res.op_start) == [0.0, 4.0, 1.0, 6.0]
    # b on another device: d0 runs r, a, then c at once (newest) - the same in both orders here
    for res in both(BRANCHES, cluster_from_dict({**make_cluster(2, memory_GB=100.0).to_dict(), "ready_order": "lifo"}),
                    [0, 0, 1, 0]):
        assert list(res.op_start) == [0.0, 1.0, 1.0, 3.0]
    assert lifo.subset([0]).ready_order == "lifo" and cluster_from_dict(lifo.to_dict()).ready_order == "lifo"
    assert "ready_order" not in fifo.to_dict()
    for bad in ("LIFO", 1, "stack"):
        with pytest.raises(ClusterError, match="ready_order"):
            cluster_from_dict({**fifo.to_dict(), "ready_order": bad})


# On d0, r (1 us) readies a (2 us) and b (3 us); on d1, s (0.5 us) sends 1000 B (1 us + 1 us) to c (1 us) on d0,
# which arrives at 2.5 while b runs.
ARRIVAL = OpGraph([Op("r", "R", 1.0), Op("a", "A", 2.0), Op("b", "B", 3.0), Op("c", "C", 1.0),
                   Op("s", "S", 0.5, output_bytes=(1000,))],
                  [Edge("r", "a", None), Edge("r", "b", None), Edge("s", "c", 0)])


def test_lifo_arrivals_last_takes_an_op_readied_by_a_transfer_after_the_devices_own():
    def ordered(order):
        return cluster_from_dict({**make_cluster(2, latency_us=1.0, memory_GB=100.0).to_dict(), "ready_order": order})

    expected = {"fifo": [0.0, 1.0, 3.0, 6.0, 0.0],  # a, b, then c (queued behind b)
                "lifo": [0.0, 5.0, 1.0, 4.0, 0.0],  # b, then c (readied last, on top), then a
                "lifo-arrivals-last": [0.0, 4.0, 1.0, 6.0, 0.0]}  # b, a, then c (at the bottom)
    for order, starts in expected.items():
        for res in both(ARRIVAL, ordered(order), [0, 0, 0, 0, 1]):
            assert list(res.op_start) == starts and res.step_time_us == 7.0
            assert [list(x) for x in res.transfers] == [[4, 0, 1, 0, 1000, 0.5, 2.5]]
    # on one device nothing arrives: the same as lifo
    for res in both(BRANCHES, cluster_from_dict({**make_cluster(1, memory_GB=100.0).to_dict(),
                                                 "ready_order": "lifo-arrivals-last"}), [0, 0, 0, 0]):
        assert list(res.op_start) == [0.0, 4.0, 1.0, 6.0]
    assert cluster_from_dict(ordered("lifo-arrivals-last").to_dict()).ready_order == "lifo-arrivals-last"


@pytest.mark.parametrize("order", ["lifo", "lifo-arrivals-last"])
@pytest.mark.parametrize("seed", range(16))
def test_fast_equals_reference_with_lifo(seed, order):
    rng = np.random.default_rng(100 + seed)
    graph = layered_dag(int(rng.integers(5, 80)), int(rng.integers(8, 140)), seed=seed,
                        colocated_fraction=0.0, control_fraction=float(rng.uniform(0.0, 0.4)))
    terms = ({}, {"send_cpu_share": 0.4, "control_transfers": True}, {"corun_slowdown": 0.3, "link_streams": 2},
             {"link_streams": 3, "send_cpu_share": 0.2, "control_transfers": True})[seed % 4]
    cluster = cluster_from_dict({**make_cluster(1 + seed % 3, memory_GB=100.0).to_dict(), **terms,
                                 "ready_order": order})
    fast, ref = both(graph, cluster, rng.integers(0, cluster.n_devices, graph.n_ops))
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)
