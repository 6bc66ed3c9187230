"""The cluster terms ``send_on_request`` (a tensor crosses only once the sender has taken up the receiver's request,
the request issued from the far end of the receiver's ready list and taken up from the far end of the sender's:
TensorFlow's `RecvTensor` call, handled on the worker's one inter-op thread after its own work) and
``sends_last`` (a sender's CPU share of a tensor with bytes joins the far end of its ready list). Exact on
hand-built graphs, held to the reference simulator, off by default."""

import numpy as np
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import ClusterError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import layered_dag
from trinity.sim import Simulator, simulate_reference

from conftest import make_cluster


def both(graph, cluster, placement):
    fast = Simulator(graph, cluster).simulate(np.array(placement), trace=True)
    ref = simulate_reference(graph, cluster, np.array(placement))
    return fast, ref


def ordered(order, **terms):
    """make_cluster's links (2 us + bytes / 1000 B/us) with a ready order and terms."""
    return cluster_from_dict({**make_cluster(2, memory_GB=100.0).to_dict(), "ready_order": order, **terms})


# a (10 us) readies d (20 us) on its own device and sends 1000 B to c (1 us) on the other.
HOARDED = OpGraph([Op("a", "A", 10.0, output_bytes=(1000,)), Op("d", "D", 20.0), Op("c", "C", 1.0)],
                  [Edge("a", "d", 0), Edge("a", "c", 0)])


def test_a_sender_busy_with_its_own_work_takes_the_request_up_after_it():
    # off: the tensor leaves when a ends (10 -> 13); on: device 1 issues the request at once, but device 0
    # takes it up only after d, which a readied on top of it (lifo-arrivals-last): 30 -> 33
    for on, c_start, x in ((False, 13.0, [10.0, 13.0]), (True, 33.0, [30.0, 33.0])):
        for res in both(HOARDED, ordered("lifo-arrivals-last", send_on_request=on), [0, 0, 1]):
            assert list(res.op_start) == [0.0, 10.0, c_start] and res.step_time_us == max(30.0, c_start + 1.0)
            assert [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000, *x]]
    # oldest first, the request (queued at 0) is taken up before d: the tensor leaves when a ends
    for res in both(HOARDED, ordered("fifo", send_on_request=True), [0, 0, 1]):
        assert list(res.op_start) == [0.0, 10.0, 13.0] and [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000,
                                                                                                  10.0, 13.0]]


# the receiver runs e (50 us) before it issues the request for a's tensor
LATE = OpGraph([*HOARDED.ops, Op("e", "E", 50.0)], HOARDED.edges)


@pytest.mark.parametrize("order", ["fifo", "lifo", "lifo-arrivals-last"])
def test_a_receiver_busy_with_its_own_work_issues_the_request_after_it(order):
    # the request leaves device 1 at 50, device 0 (idle since 30) takes it up at once: 50 -> 53
    for res in both(LATE, ordered(order, send_on_request=True), [0, 0, 1, 1]):
        assert list(res.op_start) == [0.0, 10.0, 53.0, 0.0] and res.step_time_us == 54.0
        assert [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000, 50.0, 53.0]]
    off = Simulator(LATE, ordered(order)).simulate(np.array([0, 0, 1, 1]))
    assert off.op_start[2] == 50.0  # off: the tensor arrived at 13, c waits for e alone


def test_issuing_a_request_takes_the_receivers_processor_request_cpu_us():
    # LATE: device 1 runs e (0 -> 50), then issues the request (50 -> 55); device 0, idle, takes it up at once and
    # the tensor arrives 55 -> 58: c 58 -> 59. Whatever the order, the roots come before the requests
    for order in ("fifo", "lifo", "lifo-arrivals-last"):
        for res in both(LATE, ordered(order, send_on_request=True, request_cpu_us=5.0), [0, 0, 1, 1]):
            assert list(res.op_start) == [0.0, 10.0, 58.0, 0.0] and res.step_time_us == 59.0
            assert [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000, 55.0, 58.0]]
    # HOARDED: device 1 has nothing else to do; it issues the request 0 -> 5 while device 0 runs a and d, and
    # device 0 takes it up after d as before (30 -> 33): the cost is hidden, the step unchanged (34)
    for res in both(HOARDED, ordered("lifo-arrivals-last", send_on_request=True, request_cpu_us=5.0), [0, 0, 1]):
        assert list(res.op_start) == [0.0, 10.0, 33.0] and res.step_time_us == 34.0
    # one request per copy: a tensor read by two ops on device 1 is asked for once (55, as above, not 60)
    twice = OpGraph([*LATE.ops, Op("f", "F", 1.0)], [*LATE.edges, Edge("a", "f", 0)])
    for res in both(twice, ordered("fifo", send_on_request=True, request_cpu_us=5.0), [0, 0, 1, 1, 1]):
        assert [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000, 55.0, 58.0]] and res.step_time_us == 60.0


def test_request_cpu_us_round_trip_and_refusals():
    cluster = ordered("lifo", send_on_request=True, request_cpu_us=17.5)
    assert cluster.request_cpu_us == 17.5 and cluster_from_dict(cluster.to_dict()).request_cpu_us == 17.5
    assert "request_cpu_us" not in ordered("lifo", send_on_request=True).to_dict()
    with pytest.raises(ClusterError, match="request_cpu_us.*send_on_request"):
        ordered("lifo", request_cpu_us=5.0)  # no request to issue without it
    with pytest.raises(ClusterError, match="request_cpu_us"):
        ordered("lifo", send_on_request=True, request_cpu_us=-1.0)


def test_send_on_request_with_a_cpu_share_and_control_edges():
    # a's 1000 B to c and an empty tensor to b (a control edge a -> b): one request each, issued at 0 in the order
    # their readers come (c, then b). Device 0 takes both up after d (at 30): a's first, its send share of 0.5 of
    # the bytes 30 -> 30.5, on the wire 2 + 0.5 us (arrives 33); then the empty tensor's (no time), which waits
    # for the one link until 33 and arrives at 35
    graph = OpGraph([*HOARDED.ops, Op("b", "B", 1.0)], [*HOARDED.edges, Edge("a", "b", None)])
    cluster = ordered("lifo-arrivals-last", send_on_request=True, control_transfers=True, send_cpu_share=0.5,
                      cpu_share_of="bytes")
    for res in both(graph, cluster, [0, 0, 1, 1]):
        assert res.step_time_us == 36.0 and list(res.op_start) == [0.0, 10.0, 33.0, 35.0]
        assert [tuple(t) for t in res.transfers] == [(0, 0, 0, 1, 1000, 30.0, 33.0), (0, -1, 0, 1, 0, 30.5, 35.0)]


def test_sends_last_serialises_a_tensor_after_the_work_the_sender_has_ready():
    # a send share of 0.5 of the bytes: off, a's share (readied after d, on top) goes first, 10 -> 10.5, on the
    # wire 2 + 0.5 us (arrives 13), d 10.5 -> 30.5; on, d first (10 -> 30), then the share (30 -> 30.5): arrives 33
    for last, starts, x in ((False, [0.0, 10.5, 13.0], [10.0, 13.0]), (True, [0.0, 10.0, 33.0], [30.0, 33.0])):
        cluster = ordered("lifo-arrivals-last", sends_last=last, send_cpu_share=0.5, cpu_share_of="bytes")
        for res in both(HOARDED, cluster, [0, 0, 1]):
            assert list(res.op_start) == starts and res.step_time_us == max(starts[1] + 20.0, starts[2] + 1.0)
            assert [list(t) for t in res.transfers] == [[0, 0, 0, 1, 1000, *x]]
    # an empty tensor's share (no time) goes on top as before: b's signal leaves at 10, arrives at 12
    graph = OpGraph([*HOARDED.ops, Op("b", "B", 1.0)], [*HOARDED.edges, Edge("a", "b", None)])
    cluster = ordered("lifo-arrivals-last", sends_last=True, control_transfers=True, send_cpu_share=0.5,
                      cpu_share_of="bytes")
    for res in both(graph, cluster, [0, 0, 1, 1]):
        assert list(res.op_start) == [0.0, 10.0, 33.0, 12.0] and res.step_time_us == 34.0
        assert [tuple(t) for t in res.transfers] == [(0, -1, 0, 1, 0, 10.0, 12.0), (0, 0, 0, 1, 1000, 30.0, 33.0)]
    # without a send share nothing waits on the sender's processor: the term changes nothing
    for res in both(HOARDED, ordered("lifo-arrivals-last", sends_last=True), [0, 0, 1]):
        assert list(res.op_start) == [0.0, 10.0, 13.0] and res.step_time_us == 30.0


def test_send_on_request_round_trip_default_and_refusal():
    cluster = ordered("lifo", send_on_request=True)
    assert cluster.send_on_request and cluster_from_dict(cluster.to_dict()).send_on_request
    assert cluster.subset([1, 0]).send_on_request
    assert not make_cluster(2).send_on_request and "send_on_request" not in make_cluster(2).to_dict()
    with pytest.raises(ClusterError, match="send_on_request"):
        ordered("lifo", send_on_request="yes")
    last = ordered("lifo", sends_last=True)
    assert last.sends_last and cluster_from_dict(last.to_dict()).sends_last and not last.send_on_request
    assert not make_cluster(2).sends_last and "sends_last" not in make_cluster(2).to_dict()
    with pytest.raises(ClusterError, match="sends_last"):
        ordered("lifo", sends_last=1)
    # on one device nothing crosses: the term changes nothing
    graph = layered_dag(6, 20, seed=1, colocated_fraction=0.0)
    one = [Simulator(graph, cluster_from_dict({**make_cluster(1, memory_GB=100.0).to_dict(), "send_on_request": on}))
           .simulate(np.zeros(graph.n_ops, np.int64)).step_time_us for on in (False, True)]
    assert one[0] == one[1]


@pytest.mark.parametrize("seed", range(24))
def test_fast_equals_reference_with_send_on_request_and_sends_last(seed):
    rng = np.random.default_rng(300 + seed)
    graph = layered_dag(int(rng.integers(5, 80)), int(rng.integers(8, 140)), seed=seed,
                        colocated_fraction=0.0, control_fraction=float(rng.uniform(0.0, 0.4)))
    terms = ({}, {"send_cpu_share": 0.4, "control_transfers": True}, {"corun_slowdown": 0.3, "link_streams": 2},
             {"link_streams": 3, "send_cpu_share": 0.2, "control_transfers": True, "receive_cpu_share": 0.3},
             {"latency_overlaps": True, "send_cpu_share": 0.5})[seed % 5]
    order = ("fifo", "lifo", "lifo-arrivals-last")[seed % 3]
    cluster = cluster_from_dict({**make_cluster(1 + seed % 4, memory_GB=100.0).to_dict(), **terms,
                                 "ready_order": order, "send_on_request": seed % 6 != 5,
                                 "sends_last": seed % 2 == 1,
                                 **({"request_cpu_us": (0.0, 0.7, 3.0, 12.0)[seed % 4]} if seed % 6 != 5 else {})})
    fast, ref = both(graph, cluster, rng.integers(0, cluster.n_devices, graph.n_ops))
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)
