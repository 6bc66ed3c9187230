"""How well a roofline speed model predicts op times measured on its device.

The input is a graph whose ops were timed on one device (``compute_us``, from
`trinity.profile.torch_profile.profile_torch`) and the measured time of its
whole step there. Each timed op's roofline time (`DeviceSpec.op_us` over its
FLOPs and bytes moved) is set beside its measured time, and the step's
roofline time (the sum over its ops: one device runs them one after another,
as the simulator does for a placement on one device) beside the measured step.
Ops the profiler did not time (placeholders, compute_us 0) are left out.

The roofline charges every op its bytes and a launch; an ATen op whose schema
returns a view of an input (``view``, ``t``, ``transpose``, ``expand``,
``detach``...) moves no data and launches no kernel. ``view`` marks those ops,
and the summary also gives the step with their roofline time taken out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trinity.graph.ir import OpGraph
from trinity.profile.speed_model import DeviceSpec, bytes_moved


def returns_view(op_type: str) -> bool:
    """Whether ``aten.<op>.<overload>`` returns a view of an input (a non-writing alias in its schema)."""
    parts = op_type.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return False
    import torch

    try:
        schema = getattr(getattr(torch.ops.aten, parts[1]), parts[2])._schema
    except AttributeError:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def per_op(graph: OpGraph, model: DeviceSpec) -> pd.DataFrame:
    """One row per timed op: measured and roofline time (us), their ratio, which roof binds, whether a view."""
    flops = np.array([op.flops for op in graph.ops], float)
    moved = bytes_moved(graph)
    measured = np.array([op.compute_us or 0.0 for op in graph.ops], float)
    timed = measured > 0
    compute_s = flops / (model.peak_flops * model.compute_efficiency)
    memory_s = moved / (model.memory_bandwidth * model.memory_efficiency)
    roofline = model.op_us(flops, moved)
    bound = np.where((flops == 0) & (moved == 0), "none", np.where(compute_s >= memory_s, "compute", "memory"))
    table = pd.DataFrame({
        "op": [op.name for op in graph.ops], "type": [op.type for op in graph.ops],
        "flops": flops, "bytes": moved, "measured_us": measured, "roofline_us": roofline, "bound": bound,
        "view": [returns_view(op.type) for op in graph.ops],
    })[timed].reset_index(drop=True)
    table["ratio"] = table["roofline_us"] / table["measured_us"]
    return table


def summarize(table: pd.DataFrame, step_us: float) -> dict:
    """Per-op and whole-step error of the roofline against the measurements of `per_op`'s table.

    ``median_abs_error`` is the median over ops of |roofline / measured - 1|; ``weighted_abs_error`` is
    sum |roofline - measured| / sum measured (big ops weigh more); ``within_2x`` the share of ops whose
    roofline time is within a factor of two. ``step_error`` is the roofline step (sum over ops) against
    the measured step: roofline / measured - 1; ``step_error_views_free`` the same with views costing nothing.
    """
    measured, roofline, ratio = table["measured_us"], table["roofline_us"], table["ratio"]
    views_free = roofline[~table["view"]].sum()
    return {
        "ops_timed": int(len(table)),
        "views": int(table["view"].sum()),
        "measured_step_us": float(step_us),
        "measured_us_per_op": float(step_us / len(table)),
        "roofline_step_us": float(roofline.sum()),
        "step_error": float(roofline.sum() / step_us - 1),
        "roofline_step_us_views_free": float(views_free),
        "step_error_views_free": float(views_free / step_us - 1),
        "sum_measured_op_us": float(measured.sum()),
        "median_ratio": float(ratio.median()),
        "median_abs_error": float((ratio - 1).abs().median()),
        "weighted_abs_error": float((roofline - measured).abs().sum() / measured.sum()),
        "within_2x": float(((ratio >= 0.5) & (ratio <= 2)).mean()),
    }


def by_type(table: pd.DataFrame, top: int = 12) -> pd.DataFrame:
    """The op types that take the most measured time: count, time measured and by roofline, ratio of sums."""
    grouped = table.groupby("type").agg(ops=("op", "size"), measured_us=("measured_us", "sum"),
                                        roofline_us=("roofline_us", "sum"), median_ratio=("ratio", "median"))
    grouped["ratio_of_sums"] = grouped["roofline_us"] / grouped["measured_us"]
    grouped["share_of_measured"] = grouped["measured_us"] / grouped["measured_us"].sum()
    return grouped.sort_values("measured_us", ascending=False).head(top).reset_index()
