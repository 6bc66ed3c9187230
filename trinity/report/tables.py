"""The paper's Tables 3-5, ours beside the paper's."""

from __future__ import annotations

import math

import pandas as pd

from trinity.models import model_spec


def table3(graphs: dict[str, tuple[int, int]]) -> pd.DataFrame:
    """Ops and edges per model (``graphs``: model -> (ops, edges) of the profiled graph), the paper's beside."""
    rows = []
    for model, (ops, edges) in graphs.items():
        try:
            paper = model_spec(model).paper_table3
        except Exception:  # an imported graph (gnmt_reference) has no registry entry
            paper = None
        rows.append({"model": model, "ops": ops, "edges": edges,
                     "paper_ops": paper[0] if paper else None, "paper_edges": paper[1] if paper else None,
                     "ops_vs_paper": round(ops / paper[0], 3) if paper else None})
    return pd.DataFrame(rows)


def table4(cases: pd.DataFrame) -> pd.DataFrame:
    """Runtime, peak communication and peak memory per model x devices x method (``per_case`` rows);
    "OOM" where the method's placement does not fit the devices."""
    rows = []
    for _, c in cases.iterrows():
        oom = not c["fits"]
        rows.append({
            "model": c["model"], "cluster": c["cluster"], "devices": c["devices"], "method": c["method"],
            "seeds": c["seeds"],
            "runtime_ms": "OOM" if oom else round(c["step_time_ms_mean"], 3),
            "runtime_std_ms": None if oom or c["seeds"] < 2 else round(c["step_time_ms_std"], 3),
            "peak_comm_MB": "OOM" if oom else round(c["peak_comm_MB_mean"], 1),
            "peak_memory_GB": "OOM" if oom else round(c["peak_memory_GB_mean"], 3),
        })
    return pd.DataFrame(rows)


def _change(new: float, old: float) -> float | None:
    """Relative change in percent; None where the baseline is zero (e.g. no communication at all)."""
    return round(100.0 * (new - old) / old, 2) if old and math.isfinite(old) else None


def table5(cases: pd.DataFrame) -> pd.DataFrame:
    """Trinity against Hierarchical per model x cluster: change in runtime, communication, memory, and
    search time per 1,000 iterations (negative = Trinity lower)."""
    rows = []
    for (model, cluster), case in cases.groupby(["model", "cluster"], sort=False):
        by = case.set_index("method")
        if not {"trinity", "hierarchical"} <= set(by.index):
            continue
        t, h = by.loc["trinity"], by.loc["hierarchical"]
        rows.append({
            "model": model, "cluster": cluster, "seeds": int(min(t["seeds"], h["seeds"])),
            "trinity_runtime_ms": round(t["step_time_ms_mean"], 3),
            "hierarchical_runtime_ms": round(h["step_time_ms_mean"], 3),
            "runtime_change_pct": _change(t["step_time_ms_mean"], h["step_time_ms_mean"]),
            "comm_change_pct": _change(t["peak_comm_MB_mean"], h["peak_comm_MB_mean"]),
            "memory_change_pct": _change(t["peak_memory_GB_mean"], h["peak_memory_GB_mean"]),
            "trinity_s_per_1000_it": round(t["seconds_per_1000_iterations"], 1),
            "hierarchical_s_per_1000_it": round(h["seconds_per_1000_iterations"], 1),
            "search_time_change_pct": _change(t["seconds_per_1000_iterations"], h["seconds_per_1000_iterations"]),
        })
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """A GitHub Markdown table (blank for missing values)."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float) and v.is_integer() and abs(v) >= 1000:  # counts in a column with gaps are floats
            v = int(v)
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.astype(object).itertuples(index=False)]
    return "\n".join(lines) + "\n"
