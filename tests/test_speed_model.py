"""The roofline speed model on hand-computed ops, and how graphs carry it."""

import pytest

from trinity.errors import TrinityError
from trinity.graph import Edge, Op, OpGraph
from trinity.profile.speed_model import SPECS, apply_speed_models, bytes_moved, cost_source, spec


def graph():
    ops = [Op("x", "Placeholder", 1.0, output_bytes=(4_000_000,)),
           Op("w", "VarHandleOp", 1.0, output_bytes=(1_000_000,)),
           Op("mm", "MatMul", 50.0, flops=2e9, output_bytes=(2_000_000,)),
           Op("relu", "Relu", 3.0, output_bytes=(2_000_000,)),
           Op("noop", "NoOp", 0.5)]
    return OpGraph(ops, [Edge("x", "mm"), Edge("w", "mm"), Edge("mm", "relu"), Edge("relu", "noop", None)])


def test_bytes_moved_counts_inputs_and_outputs():
    assert bytes_moved(graph()).tolist() == [4e6, 1e6, 7e6, 4e6, 0.0]


def test_roofline_by_hand():
    p100 = spec("p100")
    # MatMul: compute-bound, 2e9 / (9.3e12 * 0.7) s = 307.2197 us, + 5 us launch;
    # its 7 MB would take 7e6 / (732e9 * 0.8) s = 11.95 us.
    assert p100.op_us(2e9, 7e6) == pytest.approx(5 + 2e9 / 6.51e12 * 1e6, rel=1e-12)
    assert p100.op_us(2e9, 7e6) == pytest.approx(312.2197, abs=1e-4)
    # Relu: memory-bound, 4 MB / 585.6 GB/s = 6.8306 us, + 5 us
    assert p100.op_us(0, 4e6) == pytest.approx(11.8306, abs=1e-4)
    assert p100.op_us(0, 0) == 0.0  # a NoOp launches nothing
    assert SPECS["v100"].op_us(2e9, 7e6) < p100.op_us(2e9, 7e6)


def test_graph_carries_the_model_and_keeps_measured_times():
    g = graph()
    measured = OpGraph([Op(o.name, o.type, o.compute_us, {"p100": 99.0} if o.name == "relu" else {}, o.flops,
                           o.output_bytes) for o in g.ops], g.edges)
    out = apply_speed_models(measured, ["p100", "v100"])
    mm = out.ops[out.index["mm"]]
    assert mm.compute_us == 50.0  # this machine's measurement stays
    assert mm.compute_us_by_kind["p100"] == pytest.approx(312.2197, abs=1e-4)
    assert out.ops[out.index["relu"]].compute_us_by_kind["p100"] == 99.0  # measured there: kept
    assert out.ops[out.index["noop"]].compute_us_by_kind == {"p100": 0.0, "v100": 0.0}
    assert cost_source(out, "p100").startswith("roofline (9.3 TFLOPS x 0.7, 732 GB/s x 0.8, 5 us per op)")
    assert cost_source(out, "cpu") == "as imported, scaled by device speed"


def test_unknown_kind_is_refused_by_name():
    with pytest.raises(TrinityError, match="no speed model for device kind 'h100'.*p100, v100"):
        apply_speed_models(graph(), ["h100"])


def test_a_kind_without_any_time_is_refused_by_op_and_kind():
    import numpy as np

    from trinity.cluster import cluster_from_dict
    from trinity.costs import op_times

    g = OpGraph([Op("a", "MatMul", None, {"p100": 10.0}, output_bytes=(8,)), Op("b", "Add", 2.0)], [Edge("a", "b")])
    p100 = cluster_from_dict({"devices": [{"name": "g0", "kind": "p100", "memory_GB": 1}],
                              "default_link": {"bandwidth_GBps": 1, "latency_us": 1}})
    assert np.array_equal(op_times(g, p100), [[10.0], [2.0]])
    h100 = cluster_from_dict({"devices": [{"name": "g0", "kind": "h100", "memory_GB": 1}],
                              "default_link": {"bandwidth_GBps": 1, "latency_us": 1}})
    with pytest.raises(TrinityError, match="op 'a' has times for \\['p100'\\] but none for device kind 'h100'"):
        op_times(g, h100)


def test_roofline_only_costs_fill_every_op_from_the_model_and_measure_nothing():
    """`costs: roofline` (a graph too large to profile here): op times from the speed models alone."""
    from trinity.stages.profile import roofline_costed

    g = OpGraph([Op(o.name, o.type, 0.0, flops=o.flops, output_bytes=o.output_bytes) for o in graph().ops],
                graph().edges)
    costed = roofline_costed(g, ["p100"], "models.x.costs")
    assert [op.compute_us for op in costed.ops] == [0.0] * 5  # nothing measured on this machine
    assert costed.ops[costed.index["mm"]].compute_us_by_kind["p100"] == pytest.approx(312.2197, abs=1e-4)
    assert costed.ops[costed.index["noop"]].compute_us_by_kind["p100"] == 0.0
    assert cost_source(costed, "p100").startswith("roofline (9.3 TFLOPS x 0.7")
    with pytest.raises(TrinityError, match="needs at least one device kind in profile.speed_models") as err:
        roofline_costed(g, [], "models.x.costs")
    assert err.value.field == "models.x.costs"
