"""The simulator against hand-computed steps, and the fast one against the reference."""

from dataclasses import replace

import numpy as np
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import ClusterError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import random_dag
from trinity.placers import place
from trinity.sim import Simulator, simulate_reference

from conftest import make_cluster


def both(graph, cluster, placement):
    fast = Simulator(graph, cluster).simulate(np.array(placement), trace=True)
    ref = simulate_reference(graph, cluster, np.array(placement))
    return fast, ref


def test_chain_across_two_devices():
    # a (10 us, 2000 B out) on d0 -> b (5 us) on d1; link: 2 us + 2000 B / 1000 B/us = 4 us.
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,), temporary_bytes=100),
                 Op("b", "B", 5.0, output_bytes=(700,), temporary_bytes=300)],
                [Edge("a", "b", 0)])
    for res in both(g, make_cluster(2), [0, 1]):
        assert res.step_time_us == 19.0  # a [0,10], transfer [10,14], b [14,19]
        assert list(res.op_start) == [0.0, 14.0]
        assert list(res.sent_bytes) == [2000, 0] and list(res.received_bytes) == [0, 2000]
        assert res.peak_comm_bytes == 2000
        # d0: a's scratch 100 + a's output 2000 (live until the transfer ends)
        # d1: received copy 2000 + b's scratch 300 + b's output 700, all live at t=14
        assert list(res.peak_memory_bytes) == [2100, 3000]
        assert list(res.busy_us) == [10.0, 5.0]
        assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 10.0, 14.0]


def test_overlapping_latency_frees_the_link_once_the_bytes_are_on_it():
    # a (10 us) on d0 sends two tensors (2000 B, 1000 B) to b (5 us) on d1; link: 2 us + 1 B / ns.
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000, 1000)), Op("b", "B", 5.0)],
                [Edge("a", "b", 0), Edge("a", "b", 1)])
    serial = make_cluster(2)
    for res in both(g, serial, [0, 1]):  # the second waits for the first's whole 4 us: [14, 17]
        assert res.step_time_us == 22.0 and res.transfers[:, 5:].tolist() == [[10.0, 14.0], [14.0, 17.0]]
    for res in both(g, replace(serial, latency_overlaps=True), [0, 1]):  # for its bytes' 2 us only: [12, 15]
        assert res.step_time_us == 20.0 and res.transfers[:, 5:].tolist() == [[10.0, 14.0], [12.0, 15.0]]
    # a send CPU share of the whole time, 0.5: each transfer's CPU half runs on d0 first, the wire takes the
    # other half, of which the link is held for the bytes' part (1 us of the first's 2)
    shared = replace(serial, send_cpu_share=0.5)
    for overlaps, second_end in ((False, 15.5), (True, 15.0)):
        for res in both(g, replace(shared, latency_overlaps=overlaps), [0, 1]):
            # CPU [10, 12], wire [12, 14] (link free at 13 when overlapping); CPU [12, 13.5], wire 1.5 us
            # from 14 (serial) or 13.5 (the link free since 13)
            assert res.transfers[:, 5:].tolist() == [[10.0, 14.0], [12.0, second_end]]


def test_a_transfer_s_fixed_cost_goes_to_both_processors_by_their_shares():
    # a (10 us) on d0 sends 2000 B to b (5 us) on d1; link 2 us + 2 us of bytes; shares of the bytes' time
    # plus a fixed 3 us: the sender takes 1.0 x (2 + 3) = 5 us, the wire the latency (2), the receiver
    # 0.5 x 5 = 2.5 us: b starts at 10 + 5 + 2 + 2.5 = 19.5
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0)], [Edge("a", "b", 0)])
    terms = dict(send_cpu_share=1.0, receive_cpu_share=0.5, cpu_share_of="bytes")
    for per_transfer, b_start in ((0.0, 15.0), (3.0, 19.5)):  # without it: 10 + 2 + 2 + 0.5 x 2
        cluster = replace(make_cluster(2), **terms, transfer_cpu_us=per_transfer)
        for res in both(g, cluster, [0, 1]):
            assert res.op_start.tolist() == [0.0, b_start] and res.step_time_us == b_start + 5.0
    # an empty tensor (a control edge's) still takes no processor time
    g = OpGraph([Op("a", "A", 10.0), Op("b", "B", 5.0)], [Edge("a", "b", None)])
    cluster = replace(make_cluster(2), **terms, control_transfers=True, transfer_cpu_us=3.0)
    for res in both(g, cluster, [0, 1]):
        assert res.op_start.tolist() == [0.0, 12.0]  # the latency alone


def test_latency_overlaps_round_trips_and_bad_values_are_refused():
    plain = make_cluster(2)
    assert not plain.latency_overlaps and "latency_overlaps" not in plain.to_dict()
    on = replace(make_cluster(3), latency_overlaps=True)
    assert cluster_from_dict(on.to_dict()).latency_overlaps and on.subset([2, 0]).latency_overlaps
    costly = replace(plain, transfer_cpu_us=40.0)
    assert "transfer_cpu_us" not in plain.to_dict() and cluster_from_dict(costly.to_dict()).transfer_cpu_us == 40.0
    with pytest.raises(ClusterError, match="transfer_cpu_us"):
        cluster_from_dict({**plain.to_dict(), "transfer_cpu_us": -1})
    for bad in (1, "yes"):
        with pytest.raises(ClusterError, match="latency_overlaps"):
            cluster_from_dict({**plain.to_dict(), "latency_overlaps": bad})


def test_tensor_sent_once_per_device_and_sender_is_serial():
    # a on d0 feeds b and c on d1 (one transfer) and d on d2 (a second one, queued behind).
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0), Op("c", "C", 1.0),
                 Op("d", "D", 1.0)],
                [Edge("a", "b", 0), Edge("a", "c", 0), Edge("a", "d", 0)])
    for res in both(g, make_cluster(3), [0, 1, 1, 2]):
        assert list(res.sent_bytes) == [4000, 0, 0]
        assert list(res.received_bytes) == [0, 2000, 2000]
        assert list(res.op_start) == [0.0, 14.0, 19.0, 18.0]
        assert res.step_time_us == 20.0
        assert res.peak_comm_bytes == 4000


def test_variable_output_is_its_persistent_storage():
    # v holds 1000 persistent bytes and outputs them; r reads it locally, s on another device.
    g = OpGraph([Op("v", "VariableV2", 0.0, output_bytes=(1000,), persistent_bytes=1000),
                 Op("r", "Identity", 1.0, output_bytes=(10,)), Op("s", "Identity", 1.0, output_bytes=(10,))],
                [Edge("v", "r", 0), Edge("v", "s", 0)])
    for res in both(g, make_cluster(2), [0, 0, 1]):
        assert list(res.peak_memory_bytes) == [1010, 1010]  # storage + r's output; received copy + s's output
        assert list(res.sent_bytes) == [1000, 0]


def test_one_device_runs_ops_one_at_a_time_in_ready_order():
    g = OpGraph([Op("x", "X", 3.0), Op("y", "Y", 4.0), Op("z", "Z", 1.0)], [Edge("x", "z", None)])
    for res in both(g, make_cluster(2), [0, 0, 1]):
        assert list(res.op_start) == [0.0, 3.0, 3.0]  # control edge: no transfer, z starts when x ends
        assert res.step_time_us == 7.0
        assert res.peak_comm_bytes == 0


def test_local_tensor_lives_until_its_last_reader_ends():
    # a's 1000 B output is read by b and c on the same device: live over [0, 6).
    g = OpGraph([Op("a", "A", 1.0, output_bytes=(1000,)), Op("b", "B", 2.0, temporary_bytes=50),
                 Op("c", "C", 3.0, output_bytes=(10,))],
                [Edge("a", "b", 0), Edge("a", "c", 0)])
    for res in both(g, make_cluster(2), [0, 0, 0]):
        assert res.step_time_us == 6.0
        assert res.peak_memory_bytes[0] == 1050  # a's output + b's scratch; c's output comes after b ends
        assert res.peak_memory_bytes[1] == 0


def test_speed_and_out_of_memory():
    g = OpGraph([Op("a", "A", 10.0, persistent_bytes=3 * 10**9)], [])
    cluster = make_cluster(2, memory_GB=2, speeds=[2.0, 0.5])
    fast, ref = both(g, cluster, [0])
    assert fast.step_time_us == ref.step_time_us == 5.0
    assert list(fast.out_of_memory) == [True, False] and not fast.fits


def test_lower_bound():
    # Two chains of 10 us and one op of 4 us on 2 devices: work 24/2 = 12 > critical path 10.
    g = OpGraph([Op("a", "A", 5.0), Op("b", "B", 5.0), Op("c", "C", 10.0), Op("d", "D", 4.0)],
                [Edge("a", "b", None)])
    sim = Simulator(g, make_cluster(2))
    assert sim.lower_bound_us == 12.0
    assert Simulator(g, make_cluster(4, speeds=[1, 1, 1, 1])).lower_bound_us == 10.0


def test_send_cpu_share_takes_the_senders_processor_in_turn_with_ops():
    # a (10 us) on d0 sends 2000 B to b on d1 (4 us) and releases c on d0 (control edge).
    # With half of each transfer on the sender's processor, d0 serialises [10, 12] before c,
    # the link carries it [12, 14]; without, c starts at 10 and the link runs [10, 14].
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0), Op("c", "C", 3.0)],
                [Edge("a", "b", 0), Edge("a", "c", None)])
    shared = cluster_from_dict({"name": "cpu", "send_cpu_share": 0.5,
                                "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(2)],
                                "default_link": {"bandwidth_GBps": 1.0, "latency_us": 2.0}})
    for res in both(g, shared, [0, 1, 0]):
        assert list(res.op_start) == [0.0, 14.0, 12.0]
        assert res.step_time_us == 19.0
        assert list(res.busy_us) == [13.0, 5.0]  # ops only
        assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 10.0, 14.0]
    for res in both(g, make_cluster(2), [0, 1, 0]):
        assert list(res.op_start) == [0.0, 14.0, 10.0]


@pytest.mark.parametrize("key", ["send_cpu_share", "receive_cpu_share"])
def test_cpu_shares_must_be_fractions(key):
    from trinity.errors import ClusterError

    doc = {"name": "x", key: 1.5, "devices": [{"name": "d0", "memory_GB": 1}],
           "default_link": {"bandwidth_GBps": 1.0, "latency_us": 1.0}}
    with pytest.raises(ClusterError, match=key):
        cluster_from_dict(doc)


def test_receive_cpu_share_takes_the_receivers_processor_before_the_readers():
    # a (10 us) on d0 sends 2000 B to b on d1 (4 us on the link); c (3 us) on d1 runs from the start.
    # With half of the transfer on the receiver's processor it arrives at 14, d1 takes it up next
    # [14, 16] (c ended at 3), then b [16, 21]. With d1 busy when it arrives (c of 15 us: [0, 15]),
    # the receiver's share waits for c: [15, 17], b [17, 22]. The link record stays [10, 14].
    def graph(c_us):
        return OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0), Op("c", "C", c_us)],
                       [Edge("a", "b", 0)])
    cluster = _shared(2, receive_cpu_share=0.5)
    for c_us, b_start in ((3.0, 16.0), (15.0, 17.0)):
        for res in both(graph(c_us), cluster, [0, 1, 1]):
            assert res.op_start[1] == b_start and res.step_time_us == b_start + 5.0
            assert list(res.busy_us) == [10.0, 5.0 + c_us]  # ops only
            assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 10.0, 14.0]
    assert cluster_from_dict(cluster.to_dict()).receive_cpu_share == 0.5
    assert "receive_cpu_share" not in make_cluster(2).to_dict()


def test_receive_cpu_share_goes_before_the_ops_its_processor_readied():
    # Ready order lifo-arrivals-last: b, readied by the arrival, goes after d1's own ops, but the
    # receiver's share is taken next. a (10, 2000 B) on d0 -> b (1) on d1; on d1 e (12) releases f and g
    # (2 each). At 12 g (the newest) runs [12, 14]; the tensor arrives at 14: its share [14, 16] before f
    # [16, 18], then b [18, 19]. With a send share too (d0 [10, 12], wire [12, 14]) the wire started after g,
    # so g's end is handled first and f starts at 14: the share [16, 18], b [18, 19].
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 1.0), Op("e", "E", 12.0),
                 Op("f", "F", 2.0), Op("g", "G", 2.0)],
                [Edge("a", "b", 0), Edge("e", "f", None), Edge("e", "g", None)])
    order = {"ready_order": "lifo-arrivals-last"}
    for terms, f_start in (({}, 16.0), ({"send_cpu_share": 0.5}, 14.0)):
        for res in both(g, _shared(2, receive_cpu_share=0.5, **order, **terms), [0, 1, 1, 1, 1]):
            assert list(res.op_start) == [0.0, 18.0, 0.0, f_start, 12.0]
            assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 10.0, 14.0]


def test_cpu_shares_of_the_bytes_leave_the_latency_on_the_wire():
    # a (10 us, 2000 B) on d0 -> b (5) on d1, and a control edge to c (3) on d0 (empty tensor to d1 as well:
    # none here). Link: 2 us latency + 2000 B / 1000 B/us = 2 us of bytes. Shares of the bytes, 0.5 each:
    # the sender's processor [10, 11] (c waits for it), the wire carries latency + the rest [11, 14],
    # the receiver's processor [14, 15], b [15, 20]. As shares of the whole transfer: [10, 12], [12, 14],
    # [14, 16], b [16, 21].
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0), Op("c", "C", 3.0)],
                [Edge("a", "b", 0), Edge("a", "c", None)])
    shares = {"send_cpu_share": 0.5, "receive_cpu_share": 0.5}
    for of, c_start, b_start in (("bytes", 11.0, 15.0), ("transfer", 12.0, 16.0)):
        cluster = _shared(2, cpu_share_of=of, **shares)
        for res in both(g, cluster, [0, 1, 0]):
            assert list(res.op_start) == [0.0, b_start, c_start]
            assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 10.0, 14.0]
        assert cluster_from_dict(cluster.to_dict()).cpu_share_of == of


def test_an_empty_tensor_takes_no_processor_time_with_shares_of_the_bytes():
    # A control edge a -> b across devices moves an empty tensor: 2 us of latency on the wire, no bytes, so
    # with shares of the bytes neither processor spends anything on it; of the transfer, each spends 1 us.
    g = OpGraph([Op("a", "A", 10.0), Op("b", "B", 5.0)], [Edge("a", "b", None)])
    for of, b_start in (("bytes", 12.0), ("transfer", 13.0)):
        cluster = _shared(2, cpu_share_of=of, control_transfers=True, send_cpu_share=0.5, receive_cpu_share=0.5)
        for res in both(g, cluster, [0, 1]):
            assert res.op_start[1] == b_start


def test_cpu_share_of_must_be_known():
    from trinity.errors import ClusterError

    with pytest.raises(ClusterError, match="cpu_share_of.*must be one of transfer, bytes"):
        _shared(2, cpu_share_of="latency")


def _shared(n, **terms):
    return cluster_from_dict({"name": "shared", **terms, "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(n)],
                              "default_link": {"bandwidth_GBps": 1.0, "latency_us": 2.0}})


def test_corun_slowdown_stretches_processors_while_both_compute():
    # a (10 us) on d0 and b (6 us) on d1 start together; with c = 0.5 both run at 1/1.5 of their speed:
    # b ends at 9 having done its 6 us; a has done 6 of its 10 us, then runs alone: ends at 13.
    g = OpGraph([Op("a", "A", 10.0), Op("b", "B", 6.0)], [])
    for res in both(g, _shared(2, corun_slowdown=0.5), [0, 1]):
        assert list(res.op_end) == [13.0, 9.0] and res.step_time_us == 13.0
        assert list(res.busy_us) == [10.0, 6.0]  # the uncontended work
    for res in both(g, _shared(2, corun_slowdown=0.5), [0, 0]):  # one processor: nothing co-runs
        assert list(res.op_end) == [10.0, 16.0] and res.step_time_us == 16.0


def test_corun_slowdown_counts_busy_processors_and_moves_ends_when_one_starts():
    # c = 1; a (8 us) on d0, d (4) on d1, e (2) on d2 start at 0; d releases b (4) on d1.
    # 3 busy, stretch 3: e ends at 6 (a has 6 left, d 2); stretch 2: d ends at 10 (a has 4 left);
    # b starts, still 2 busy: a and b, 4 us each, both end at 18.
    g = OpGraph([Op("a", "A", 8.0), Op("d", "D", 4.0), Op("e", "E", 2.0), Op("b", "B", 4.0)],
                [Edge("d", "b", None)])
    for res in both(g, _shared(3, corun_slowdown=1.0), [0, 1, 2, 1]):
        assert list(res.op_start) == [0.0, 0.0, 0.0, 10.0]
        assert list(res.op_end) == [18.0, 10.0, 6.0, 18.0]
        assert res.step_time_us == 18.0


def test_corun_slowdown_slows_the_senders_share_of_a_transfer():
    # a (10, 2000 B) on d0 -> b (5) on d1, c (6) on d1 from the start; share 0.5 of the 4 us transfer.
    # c = 1: a and c co-run at half speed: c ends at 12 (a has done 6), a alone ends at 16; the
    # sender's 2 us share runs alone [16, 18], the wire [18, 20], b alone [20, 25].
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(2000,)), Op("b", "B", 5.0), Op("c", "C", 6.0)],
                [Edge("a", "b", 0)])
    for res in both(g, _shared(2, corun_slowdown=1.0, send_cpu_share=0.5), [0, 1, 1]):
        assert list(res.op_end) == [16.0, 25.0, 12.0]
        assert list(res.transfers[0]) == [0, 0, 0, 1, 2000, 16.0, 20.0]


def test_step_sync_adds_a_round_per_extra_device():
    g = OpGraph([Op("a", "A", 10.0), Op("b", "B", 6.0), Op("c", "C", 1.0)], [])
    cluster = _shared(3, step_sync_us=2.5)
    for placement, step in (([0, 0, 0], 17.0), ([0, 1, 1], 12.5), ([0, 1, 2], 15.0)):
        for res in both(g, cluster, placement):
            assert res.step_time_us == step
            assert res.op_end.max() == step - 2.5 * (len(set(placement)) - 1)


def test_shared_machine_terms_are_zero_by_default_and_refused_when_negative():
    from trinity.errors import ClusterError

    c = make_cluster(2)
    assert c.corun_slowdown == 0.0 and c.step_sync_us == 0.0
    assert "corun_slowdown" not in c.to_dict() and "step_sync_us" not in c.to_dict()
    terms = _shared(2, corun_slowdown=0.25, step_sync_us=3.0)
    again = cluster_from_dict(terms.to_dict())
    assert (again.corun_slowdown, again.step_sync_us) == (0.25, 3.0)
    assert terms.subset([1, 0]).corun_slowdown == 0.25
    for key in ("corun_slowdown", "step_sync_us"):
        with pytest.raises(ClusterError, match=key):
            _shared(2, **{key: -1.0})


CLUSTERS = [
    make_cluster(2),
    make_cluster(3, latency_us=0.0),
    make_cluster(4, speeds=[1.0, 2.0, 0.5, 1.0]),
    cluster_from_dict({"name": "asym", "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(3)],
                       "default_link": {"bandwidth_GBps": 2.0, "latency_us": 1.0},
                       "links": [{"src": "d0", "dst": "d1", "bandwidth_GBps": 0.5, "latency_us": 3.0,
                                  "symmetric": False}]}),
]


CLUSTERS.append(cluster_from_dict({"name": "cpu-workers", "send_cpu_share": 0.6,
                                   "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(3)],
                                   "default_link": {"bandwidth_GBps": 1.0, "latency_us": 3.0}}))

CLUSTERS.append(_shared(3, corun_slowdown=0.3, step_sync_us=1.5, send_cpu_share=0.4))
CLUSTERS.append(_shared(2, corun_slowdown=0.7))
CLUSTERS.append(_shared(3, receive_cpu_share=0.5, ready_order="lifo-arrivals-last"))
CLUSTERS.append(_shared(2, send_cpu_share=0.3, receive_cpu_share=0.4, corun_slowdown=0.2, control_transfers=True,
                        link_streams=2))
CLUSTERS.append(_shared(3, send_cpu_share=0.5, receive_cpu_share=0.3, cpu_share_of="bytes", control_transfers=True,
                        ready_order="lifo-arrivals-last", corun_slowdown=0.1))
CLUSTERS.append(_shared(2, send_cpu_share=0.7, cpu_share_of="bytes", link_streams=3))
CLUSTERS.append(_shared(3, send_cpu_share=0.4, receive_cpu_share=0.2, cpu_share_of="bytes", control_transfers=True,
                        ready_order="lifo-arrivals-last", corun_slowdown=0.1, latency_overlaps=True))
CLUSTERS.append(_shared(2, send_cpu_share=0.3, link_streams=2, latency_overlaps=True))
CLUSTERS.append(_shared(3, latency_overlaps=True))
CLUSTERS.append(_shared(3, send_cpu_share=1.0, receive_cpu_share=0.3, cpu_share_of="bytes", control_transfers=True,
                        ready_order="lifo-arrivals-last", latency_overlaps=True, transfer_cpu_us=1.5))
CLUSTERS.append(_shared(2, send_cpu_share=0.4, receive_cpu_share=0.5, transfer_cpu_us=0.7, corun_slowdown=0.2))


@pytest.mark.parametrize("seed", range(150))
def test_fast_equals_reference_on_random_dags(seed):
    rng = np.random.default_rng(seed)
    graph = random_dag(int(rng.integers(2, 25)), float(rng.uniform(0.05, 0.5)), seed=seed)
    cluster = CLUSTERS[seed % len(CLUSTERS)]
    placement = place("random", graph, cluster, seed=seed).placement
    fast, ref = both(graph, cluster, placement)
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.op_start, ref.op_start)
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.busy_us, ref.busy_us)
    np.testing.assert_array_equal(fast.sent_bytes, ref.sent_bytes)
    np.testing.assert_array_equal(fast.received_bytes, ref.received_bytes)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)
    assert fast.lower_bound_us == ref.lower_bound_us
    assert fast.step_time_us >= fast.lower_bound_us - 1e-9


def test_a_simulator_moved_to_other_transfer_terms_equals_one_built_there():
    """`Simulator.on` keeps the op times and bound and takes the rest from the new cluster: every cluster of
    three devices above, reached from plain links, simulates as a simulator built on it does."""
    graph = random_dag(20, 0.3, seed=7)
    plain = _shared(3)
    start = Simulator(graph, plain)
    for cluster in [c for c in CLUSTERS if c.devices == plain.devices]:
        placement = place("random", graph, cluster, seed=3).placement
        moved, built = start.on(cluster).simulate(placement, trace=True), Simulator(graph, cluster).simulate(
            placement, trace=True)
        assert moved.step_time_us == built.step_time_us and moved.lower_bound_us == built.lower_bound_us
        np.testing.assert_array_equal(moved.op_end, built.op_end)
        np.testing.assert_array_equal(moved.transfers, built.transfers)
    assert start.cluster is plain  # the one it was moved from is as it was
    with pytest.raises(ValueError, match="other devices"):
        start.on(_shared(2))


@pytest.mark.parametrize("n_dev", [63, 64, 65, 128, 1024])
def test_fast_equals_reference_past_64_devices(n_dev):
    """Devices past 63 once fell out of an int64 bit mask (a 64-device step time was 0)."""
    from trinity.graph.synthetic import layered_dag

    graph = layered_dag(400, 700, seed=n_dev, colocated_fraction=0.0)
    cluster = make_cluster(n_dev, memory_GB=100.0)
    placement = np.random.default_rng(n_dev).integers(0, n_dev, graph.n_ops)
    fast, ref = both(graph, cluster, placement)
    assert fast.step_time_us == ref.step_time_us > 0
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)


@pytest.mark.parametrize("overlaps", [False, True])
def test_fast_equals_reference_with_corun_past_the_heap_threshold(overlaps):
    """Past HEAP_FROM_DEVICES the fast simulator keeps completions in a heap, rebuilt when ends move."""
    from trinity.graph.synthetic import layered_dag

    graph = layered_dag(300, 500, seed=3, colocated_fraction=0.0)
    cluster = _shared(60, corun_slowdown=0.05, step_sync_us=1.0, send_cpu_share=0.3, receive_cpu_share=0.2,
                      cpu_share_of="bytes", latency_overlaps=overlaps)
    placement = np.random.default_rng(3).integers(0, 60, graph.n_ops)
    fast, ref = both(graph, cluster, placement)
    assert fast.step_time_us == ref.step_time_us > 0
    np.testing.assert_array_equal(fast.op_end, ref.op_end)
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.transfers, ref.transfers)

def test_fast_equals_reference_on_gnmt(reference_gnmt_path):
    from trinity.cluster import load_cluster
    from trinity.graph import load_graph

    graph, cluster = load_graph(reference_gnmt_path), load_cluster("p100x4")
    placement = place("round-robin", graph, cluster).placement
    fast, ref = both(graph, cluster, placement)
    assert fast.step_time_us == ref.step_time_us
    np.testing.assert_array_equal(fast.peak_memory_bytes, ref.peak_memory_bytes)
    np.testing.assert_array_equal(fast.sent_bytes, ref.sent_bytes)


def test_simulation_is_deterministic():
    graph = random_dag(30, 0.2, seed=3)
    sim = Simulator(graph, make_cluster(3))
    p = place("random", graph, make_cluster(3), seed=1).placement
    a, b = sim.simulate(p), sim.simulate(p)
    assert a.step_time_us == b.step_time_us
    np.testing.assert_array_equal(a.op_start, b.op_start)
