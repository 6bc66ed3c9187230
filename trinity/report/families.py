"""Every strategy family side by side (``results/families/<model>.json``, the families stage) as one table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trinity.fileio import read_json
from trinity.plots import _save, plt


def side_by_side(results_dir: Path) -> pd.DataFrame:
    """``results/families/<model>.json`` as one row per model x cluster x entry: the predicted winner marked
    (``winner``), and on clusters of local ranks each entry's real step time and the measured winner."""
    rows = []
    for path in sorted((Path(results_dir) / "families").glob("*.json")):
        doc = read_json(path)
        for case in doc.get("cases", []):
            top = case.get("winner") or {}
            real_top = case.get("measured_winner") or {}
            for entry in case["entries"]:
                won = entry["family"] == top.get("family") and entry["method"] == top.get("method")
                real = entry.get("real_step_ms")
                rows.append({"model": case["model"], "cluster": case["cluster"], "family": entry["family"],
                             "method": entry["method"], "step_time_ms": round(entry["step_time_ms"], 3),
                             "comm_share": round(entry["comm_share"], 4), "comm_MB": round(entry["comm_MB"], 3),
                             "peak_memory_GB": round(entry["peak_memory_GB"], 4), "fits": entry["fits"],
                             "winner": won, "real_step_ms": None if real is None else round(real, 3),
                             "measured_winner": (entry["family"] == real_top.get("family")
                                                 and entry["method"] == real_top.get("method")) if real_top else None,
                             "note": top.get("note", "") if won else "", "detail": entry.get("detail", "")})
    return pd.DataFrame(rows)


def plot_measured(table: pd.DataFrame, path) -> bool:
    """Predicted beside measured step time of every entry run for real, one panel per model x cluster."""
    real = table[pd.to_numeric(table["real_step_ms"], errors="coerce").notna()]
    if not len(real):
        return False
    cases = list(dict.fromkeys(zip(real["model"], real["cluster"])))
    width = max(5.0, 0.55 * max(len(real[(real["model"] == m) & (real["cluster"] == c)]) for m, c in cases))
    fig, axes = plt.subplots(1, len(cases), figsize=(width * len(cases), 4.4), squeeze=False, layout="constrained")
    for ax, (model, cluster) in zip(axes[0], cases):
        part = real[(real["model"] == model) & (real["cluster"] == cluster)]
        x = np.arange(len(part))
        ax.bar(x - 0.2, part["step_time_ms"].astype(float), 0.4, label="predicted")
        ax.bar(x + 0.2, part["real_step_ms"].astype(float), 0.4, label="measured")
        ax.set_xticks(x, [f"{m}{'*' if w else ''}" for m, w in zip(part["method"], part["winner"])], rotation=45,
                      ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_ylabel("step time (ms)")
        ax.set_title(f"{model} on {cluster} (* predicted winner)", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("pipelines and data parallelism:\npredicted and measured on local ranks (one real run each)",
                 fontsize=10)
    _save(fig, path)
    return True


def errors(table: pd.DataFrame) -> pd.DataFrame:
    """Per family, over the entries run for real: how many, the median and largest |predicted - measured| /
    measured, and in how many cases (model x cluster) the predicted winner is the measured one."""
    real = table[pd.to_numeric(table.get("real_step_ms"), errors="coerce").notna()] if len(table) else table
    if not len(real):
        return pd.DataFrame()
    err = (real["step_time_ms"].astype(float) - real["real_step_ms"].astype(float)).abs() / \
        real["real_step_ms"].astype(float)
    rows = [{"family": fam, "entries": int(len(e)), "median_abs_error": float(e.median()),
             "max_abs_error": float(e.max())} for fam, e in err.groupby(real["family"], sort=False)]
    cases = real.groupby(["model", "cluster"], sort=False)
    picked = sum(bool((c["winner"] & c["measured_winner"].fillna(False).astype(bool)).any()) for _, c in cases)
    rows.append({"family": "all (winner predicted)", "entries": int(len(real)),
                 "median_abs_error": float(err.median()), "max_abs_error": float(err.max()),
                 "cases": len(cases), "winner_predicted": picked})
    return pd.DataFrame(rows).round(4)


def measured(results_dir: Path) -> pd.DataFrame:
    """Every real run of the measure stages (``results/measure/<model>/<cluster>-<method>.metrics.json``) with
    its prediction: one row per run, sorted by measured step time within each model x cluster; data-parallel
    runs also carry the cost model's computation term and the slowest rank's measured forward and backward."""
    rows = []
    for path in sorted((Path(results_dir) / "measure").glob("*/*-*.metrics.json")):  # <cluster>-<method>
        m = read_json(path)
        real, sim = m.get("real_step_ms"), m.get("sim_step_ms")
        rows.append({"model": m["model"], "cluster": m["cluster"], "family": m["family"], "method": m["method"],
                     "sim_step_ms": sim, "real_step_ms": real,
                     "error": None if real is None else (sim - real) / real,
                     # data parallelism's computation term against the slowest rank's own timers
                     "sim_compute_ms": m.get("sim_compute_ms"), "real_compute_ms": m.get("real_compute_ms"),
                     "plan": m.get("plan", "")})
    table = pd.DataFrame(rows)
    if len(table):
        table = table.sort_values(["model", "cluster", "real_step_ms"]).reset_index(drop=True)
    return table.round(4)
