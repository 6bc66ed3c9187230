"""The paper's linear op cost model: time ~ FLOPs and bytes, per op type where data allow.

For one device kind, an op's time is predicted as

    t = a_type * flops + b_type * bytes + c_type     (microseconds)

where ``bytes`` is what the op reads and writes (its inputs' and outputs'
sizes) and the coefficients are non-negative least squares fits (scipy's
NNLS) over profiled ops of that type. Types with fewer than
``min_samples`` profiled ops share one fit over all ops.

A graph profiled on one kind is costed for another kind by fitting there
when profiles of that kind exist, else by scaling the fitted model by the
devices' relative speed (`LinearCostModel.scaled`): FLOP-bound and
byte-bound terms scale alike, an assumption stated in every report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import nnls

from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph

GLOBAL = "*"


def op_features(graph: OpGraph) -> np.ndarray:
    """float64[n_ops, 3]: FLOPs, bytes read + written, 1."""
    a = graph.arrays
    out_bytes = np.bincount(a.tensor_owner, weights=a.tensor_bytes, minlength=graph.n_ops)
    in_bytes = np.bincount(a.dst, weights=a.edge_bytes, minlength=graph.n_ops)
    flops = np.array([op.flops for op in graph.ops], dtype=np.float64)
    return np.column_stack([flops, in_bytes + out_bytes, np.ones(graph.n_ops)])


@dataclass
class LinearCostModel:
    kind: str
    #: op type (or GLOBAL) -> (us per FLOP, us per byte, us per op)
    coefficients: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def predict(self, graph: OpGraph) -> np.ndarray:
        x = op_features(graph)
        coef = np.array([self.coefficients.get(op.type, self.coefficients[GLOBAL]) for op in graph.ops])
        return (x * coef).sum(axis=1)

    def scaled(self, kind: str, speedup: float) -> "LinearCostModel":
        """The model for a device ``speedup`` times faster (all terms scale alike)."""
        if not speedup > 0:
            raise TrinityError(f"speedup must be > 0, got {speedup}", field="cost_model")
        return replace(self, kind=kind, coefficients={t: tuple(c / speedup for c in cs)
                                                      for t, cs in self.coefficients.items()})

    def to_dict(self) -> dict:
        return {"kind": self.kind, "coefficients": {t: list(c) for t, c in self.coefficients.items()}}


def _measured(graph: OpGraph, observed: set[str] | None):
    """Indices of ops whose time was measured: in ``observed`` if given, else with a compute_us."""
    return [i for i, op in enumerate(graph.ops)
            if op.compute_us is not None and (observed is None or op.name in observed)]


def fit_cost_model(graphs: list[OpGraph], kind: str, *, min_samples: int = 8,
                   observed: list[set[str]] | None = None) -> LinearCostModel:
    """Fit on the measured ops of ``graphs`` (``observed[j]``: names measured in graph j, if not all)."""
    xs, ys, types = [], [], []
    for j, g in enumerate(graphs):
        x = op_features(g)
        for i in _measured(g, observed[j] if observed else None):
            xs.append(x[i])
            ys.append(g.ops[i].compute_us)
            types.append(g.ops[i].type)
    if not ys:
        raise TrinityError("no op has a measured compute_us: profile the graph first", field="compute_us")
    x, y, types = np.array(xs), np.array(ys), np.array(types)
    model = LinearCostModel(kind, {GLOBAL: _nnls(x, y)})
    for t in np.unique(types):
        rows = types == t
        if rows.sum() >= min_samples:
            model.coefficients[str(t)] = _nnls(x[rows], y[rows])
    return model


def _nnls(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    # Columns differ by many orders of magnitude (FLOPs vs 1): fit on unit-scaled columns.
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(x / scale, y)
    return tuple(float(c) for c in coef / scale)


def fit_report(model: LinearCostModel, graphs: list[OpGraph], observed: list[set[str]] | None = None) -> dict:
    """How well the model predicts measured ops: per-op and whole-graph errors."""
    pred, meas = [], []
    for j, g in enumerate(graphs):
        p = model.predict(g)
        for i in _measured(g, observed[j] if observed else None):
            pred.append(p[i])
            meas.append(g.ops[i].compute_us)
    pred, meas = np.array(pred), np.array(meas)
    big = meas >= max(1.0, np.percentile(meas, 50))  # relative error means little for ~0 us ops
    rel = np.abs(pred[big] - meas[big]) / meas[big]
    ss_res = float(((pred - meas) ** 2).sum())
    ss_tot = float(((meas - meas.mean()) ** 2).sum()) or 1.0
    return {
        "kind": model.kind, "ops": int(len(meas)), "types_fitted": len(model.coefficients) - 1,
        "r2": 1.0 - ss_res / ss_tot,
        "median_rel_error_big_ops": float(np.median(rel)) if len(rel) else float("nan"),
        "p90_rel_error_big_ops": float(np.percentile(rel, 90)) if len(rel) else float("nan"),
        "total_rel_error": float(abs(pred.sum() - meas.sum()) / max(meas.sum(), 1e-9)),
    }


def apply_cost_models(graph: OpGraph, models: list[LinearCostModel], measured: set[str] = frozenset()) -> OpGraph:
    """A copy of ``graph`` whose ops carry each model's prediction in ``compute_us_by_kind``.

    Measured times are kept: ops named in ``measured`` keep their
    ``compute_us`` as their time on the first model's kind (the kind they
    were measured on); ops the profiler never saw get the prediction of the
    first model as their ``compute_us``.
    """
    preds = {m.kind: m.predict(graph) for m in models}
    ops = []
    for i, op in enumerate(graph.ops):
        by_kind = dict(op.compute_us_by_kind)
        if models and op.name in measured and op.compute_us is not None:
            by_kind.setdefault(models[0].kind, op.compute_us)
        for kind, p in preds.items():
            by_kind.setdefault(kind, float(max(p[i], 0.0)))
        compute = op.compute_us if op.compute_us is not None else (
            float(max(preds[models[0].kind][i], 0.0)) if models else None)
        ops.append(replace(op, compute_us_by_kind=by_kind, compute_us=compute))
    meta = {**graph.meta, "cost_models": [m.to_dict() for m in models]}
    return OpGraph(ops, graph.edges, name=graph.name, meta=meta, source=graph.source)
