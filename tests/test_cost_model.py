"""The linear cost model recovers known coefficients from synthetic profiles."""

import numpy as np
import pytest

from trinity.errors import TrinityError
from trinity.graph import Edge, Op, OpGraph
from trinity.profile.cost_model import GLOBAL, apply_cost_models, fit_cost_model, fit_report, op_features


def synthetic(seed=0, n=200, noise=0.0):
    # Two op types with known costs; each op reads the previous op's output.
    truth = {"MatMul": (2e-4, 0.0, 5.0), "Add": (0.0, 1e-3, 1.0)}
    rng = np.random.default_rng(seed)
    ops, edges = [], []
    for i in range(n):
        kind = "MatMul" if i % 2 else "Add"
        flops = float(rng.integers(1e4, 1e6)) if kind == "MatMul" else 0.0
        ops.append(Op(f"o{i}", kind, flops=flops, output_bytes=(int(rng.integers(100, 10_000)),)))
        if i:
            edges.append(Edge(f"o{i - 1}", f"o{i}", 0))
    g = OpGraph(ops, edges)
    x = op_features(g)
    times = [float(x[i] @ np.array(truth[op.type])) * (1 + noise * rng.standard_normal()) for i, op in enumerate(ops)]
    return OpGraph([Op(**{**{f: getattr(op, f) for f in op.__slots__}, "compute_us": t})
                    for op, t in zip(ops, times)], edges), truth


def test_features():
    g = OpGraph([Op("a", "A", output_bytes=(100,)), Op("b", "B", flops=7.0, output_bytes=(30,))], [Edge("a", "b", 0)])
    np.testing.assert_array_equal(op_features(g), [[0, 100, 1], [7, 130, 1]])


def test_fit_recovers_known_coefficients():
    g, truth = synthetic()
    model = fit_cost_model([g], "cpu")
    for t, coef in truth.items():
        np.testing.assert_allclose(model.coefficients[t], coef, rtol=1e-6, atol=1e-9)
    report = fit_report(model, [g])
    assert report["r2"] == pytest.approx(1.0) and report["median_rel_error_big_ops"] < 1e-6


def test_fit_with_noise_and_scaling():
    g, truth = synthetic(noise=0.05, n=2000)
    model = fit_cost_model([g], "cpu")
    np.testing.assert_allclose(model.coefficients["MatMul"][0], truth["MatMul"][0], rtol=0.05)
    fast = model.scaled("p100", 4.0)
    np.testing.assert_allclose(fast.predict(g), model.predict(g) / 4.0)
    costed = apply_cost_models(g, [model, fast])
    assert costed.ops[1].compute_us_by_kind["p100"] == pytest.approx(fast.predict(g)[1])
    assert costed.ops[1].compute_us == g.ops[1].compute_us  # measured times are kept


def test_rare_types_use_the_global_fit():
    g, _ = synthetic(n=10)
    model = fit_cost_model([g], "cpu", min_samples=8)
    assert set(model.coefficients) == {GLOBAL}


def test_unprofiled_graph_is_refused():
    with pytest.raises(TrinityError, match="profile the graph first"):
        fit_cost_model([OpGraph([Op("a", "A")], [])], "cpu")
