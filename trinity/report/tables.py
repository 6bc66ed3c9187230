"""The paper's Tables 3-5, ours beside the paper's."""

from __future__ import annotations

import math

import pandas as pd

from trinity.errors import TrinityError
from trinity.models import model_spec
from trinity.report import paper


def _paper_size(model: str) -> tuple[int, int] | None:
    try:
        return model_spec(model).paper_table3
    except TrinityError:  # an imported graph (gnmt_reference) has no registry entry
        return None


def table3(graphs: dict[str, tuple[int, int]]) -> pd.DataFrame:
    """Ops and edges per model (``graphs``: model -> (ops, edges) of the profiled graph), the paper's beside."""
    rows = []
    for model, (ops, edges) in graphs.items():
        size = _paper_size(model)
        rows.append({"model": model, "ops": ops, "edges": edges,
                     "paper_ops": size[0] if size else None, "paper_edges": size[1] if size else None,
                     "ops_vs_paper": round(ops / size[0], 3) if size else None})
    return pd.DataFrame(rows)


def _rounded(value: float, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


#: (per_case metric, Table 4's mean column, its std column, decimals)
TABLE4_METRICS = (("step_time_ms", "runtime_ms", "runtime_std_ms", 3),
                  ("peak_comm_MB", "peak_comm_MB", "peak_comm_std_MB", 3),
                  ("peak_memory_GB", "peak_memory_GB", "peak_memory_std_GB", 4))


def table4(cases: pd.DataFrame) -> pd.DataFrame:
    """Runtime (ms), peak communication (MB) and peak memory (GB) per model x devices x method (`per_case`
    rows): mean over seeds, sample std where there are several; "OOM" where no seed's placement fits."""
    rows = []
    for _, c in cases.iterrows():
        oom = not c["fits"]
        several = c["seeds"] >= 2 and not oom
        published = paper.TABLE4.get((c["model"], int(c["devices"]), c["method"]), {})
        row = {"model": c["model"], "cluster": c["cluster"], "devices": int(c["devices"]), "method": c["method"],
               "seeds": int(c["seeds"]), "oom_seeds": int(c["oom_seeds"])}
        for metric, mean_column, std_column, digits in TABLE4_METRICS:
            row[mean_column] = "OOM" if oom else _rounded(c[f"{metric}_mean"], digits)
            row[std_column] = _rounded(c[f"{metric}_std"], digits) if several else None
        row.update({"paper_runtime_s": published.get("runtime_s"), "paper_peak_comm_MB": published.get("peak_comm_MB"),
                    "paper_peak_memory_GB": published.get("peak_memory_GB")})
        rows.append(row)
    return pd.DataFrame(rows)


def change_pct(new: float, old: float) -> float | None:
    """Relative change in percent; None where the baseline is zero or missing (e.g. no communication at all)."""
    if old is None or new is None or not (math.isfinite(old) and math.isfinite(new)) or old == 0:
        return None
    return round(100.0 * (new - old) / old, 2)


PAPER_TABLE5_KEYS = ("runtime_change_pct", "comm_change_pct", "memory_change_pct", "search_time_change_pct")
TABLE5_COLUMNS = ["model", "cluster", "devices", "seeds", "trinity_runtime_ms", "hierarchical_runtime_ms",
                  "runtime_change_pct", "comm_change_pct", "memory_change_pct", "trinity_s_per_1000_it",
                  "hierarchical_s_per_1000_it", "search_time_change_pct",
                  *(f"paper_{k}" for k in PAPER_TABLE5_KEYS)]


def table5(cases: pd.DataFrame) -> pd.DataFrame:
    """Trinity against Hierarchical per model x cluster (both run): relative change of the mean runtime,
    communication and memory, and of the search time per 1,000 iterations (negative = Trinity lower)."""
    rows = []
    for (model, cluster), case in cases.groupby(["model", "cluster"], sort=False):
        by = case.set_index("method")
        if not {"trinity", "hierarchical"} <= set(by.index):
            continue
        t, h = by.loc["trinity"], by.loc["hierarchical"]
        both_fit = bool(t["fits"] and h["fits"])

        def change(metric: str) -> float | None:
            return change_pct(t[f"{metric}_mean"], h[f"{metric}_mean"]) if both_fit else None

        published = paper.TABLE5.get((model, int(t["devices"])), {})
        rows.append({
            "model": model, "cluster": cluster, "devices": int(t["devices"]),
            "seeds": int(min(t["seeds"], h["seeds"])),
            "trinity_runtime_ms": _rounded(t["step_time_ms_mean"], 3) if t["fits"] else "OOM",
            "hierarchical_runtime_ms": _rounded(h["step_time_ms_mean"], 3) if h["fits"] else "OOM",
            "runtime_change_pct": change("step_time_ms"),
            "comm_change_pct": change("peak_comm_MB"),
            "memory_change_pct": change("peak_memory_GB"),
            "trinity_s_per_1000_it": _rounded(t["seconds_per_1000_iterations"], 2),
            "hierarchical_s_per_1000_it": _rounded(h["seconds_per_1000_iterations"], 2),
            "search_time_change_pct": change_pct(t["seconds_per_1000_iterations"], h["seconds_per_1000_iterations"]),
            **{f"paper_{k}": published.get(k) for k in PAPER_TABLE5_KEYS},
        })
    return pd.DataFrame(rows, columns=TABLE5_COLUMNS)


def markdown(table: pd.DataFrame) -> str:
    """A GitHub Markdown table (blank for missing values, thousands separated in counts). A paper column
    with no value at all is left out: the CSV keeps it, the page stays readable."""
    table = table.drop(columns=[c for c in table.columns if "paper" in c and table[c].isna().all()])
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float) and v.is_integer() and abs(v) >= 1000:  # counts in a column with gaps are floats
            v = int(v)
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.astype(object).itertuples(index=False)]
    return "\n".join(lines) + "\n"
