"""The pipeline-parallel family's results: every plan's prediction (``results/partition``) with the real
runs beside (``results/measure``), per-case means over seeds, TAPP (without and with its polish) against
PipeDream and the optimum, every plan also on PipeDream's objective, and measured against predicted step
times."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.errors import TrinityError
from trinity.fileio import read_json
from trinity.plots import _save, plt

ORDER = ("tapp", "tapp-polish", "pipedream", "even", "dp")
COLUMNS = ["model", "cluster", "method", "seed", "plan", "sim_step_ms", "real_step_ms", "step_error", "sim_comm_share",
           "real_comm_share", "comm_MB", "memory_per_stage_GB", "optimum_step_ms", "vs_optimum_pct", "pipedream_objective_ms",
           "search_seconds"]


def results(results_dir: Path) -> pd.DataFrame:
    """One row per plan; the measured columns filled for the plans the measure stage ran."""
    measured = {}
    for path in sorted((Path(results_dir) / "measure").glob("*/*/metrics.json")):
        m = read_json(path)
        measured[(m["model"], m["cluster"], m["method"])] = m
    rows = []
    for path in sorted((Path(results_dir) / "partition").glob("*/*/metrics.json")):
        p = read_json(path)
        if not isinstance(p, dict) or not {"model", "cluster", "method", "seed", "step_time_ms"} <= p.keys():
            raise TrinityError("not a partition job's metrics", source=str(path))
        real = measured.get((p["model"], p["cluster"], p["method"])) if p["seed"] == 0 else None
        rows.append({"model": p["model"], "cluster": p["cluster"], "method": p["method"], "seed": p["seed"],
                     "plan": p["plan"], "sim_step_ms": p["step_time_ms"],
                     "real_step_ms": real["real_step_ms"] if real else None,
                     "step_error": real["step_error"] if real else None, "sim_comm_share": p["comm_share"],
                     "real_comm_share": real.get("real_comm_share") if real else None, "comm_MB": p.get("comm_MB"),
                     "memory_per_stage_GB": " ".join(f"{g:.3f}" for g in p.get("memory_per_device_GB", [])),
                     "optimum_step_ms": p.get("optimum_step_time_ms"), "vs_optimum_pct": p.get("vs_optimum_pct"),
                     "pipedream_objective_ms": p.get("pipedream_objective_ms"),
                     "search_seconds": p.get("search_seconds")})
    table = pd.DataFrame(rows, columns=COLUMNS)
    order = {m: i for i, m in enumerate(ORDER)}
    if len(table):
        table = table.assign(_o=table["method"].map(lambda m: order.get(m, len(order))))
        table = table.sort_values(["model", "cluster", "_o", "seed"]).drop(columns="_o")
    return table.reset_index(drop=True)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model x cluster x method: mean and spread of the predicted step time over seeds, the worst gap to
    the optimum, the measured step time (seed 0); and per case whether TAPP's every seed is at or below
    PipeDream's plan."""
    rows = []
    for (model, cluster), case in table.groupby(["model", "cluster"], sort=False):
        pipedream = case[case["method"] == "pipedream"]["sim_step_ms"]
        for method, part in case.groupby("method", sort=False):
            row = {"model": model, "cluster": cluster, "method": method, "seeds": len(part),
                   "sim_step_ms": part["sim_step_ms"].mean(), "sim_step_std_ms": part["sim_step_ms"].std(ddof=1),
                   "sim_comm_share": part["sim_comm_share"].mean(),
                   "worst_vs_optimum_pct": pd.to_numeric(part["vs_optimum_pct"], errors="coerce").max(),
                   "pipedream_objective_ms": pd.to_numeric(part["pipedream_objective_ms"], errors="coerce").mean(),
                   "real_step_ms": pd.to_numeric(part["real_step_ms"], errors="coerce").mean(),
                   "real_comm_share": pd.to_numeric(part["real_comm_share"], errors="coerce").mean(),
                   "step_error": pd.to_numeric(part["step_error"], errors="coerce").mean()}
            if method.startswith("tapp") and len(pipedream):
                row["at_or_below_pipedream"] = bool((part["sim_step_ms"] <= pipedream.min() * (1 + 1e-9)).all())
            rows.append(row)
    return pd.DataFrame(rows).round(4)


def plot_measured(table: pd.DataFrame, path: str | os.PathLike) -> bool:
    """Measured beside predicted step time per method, one panel per model (the measured plans only)."""
    real = table[pd.to_numeric(table["real_step_ms"], errors="coerce").notna()]
    if not len(real):
        return False
    models = list(dict.fromkeys(real["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.2), squeeze=False, layout="constrained")
    for ax, model in zip(axes[0], models):
        part = real[real["model"] == model]
        x = np.arange(len(part))
        ax.bar(x - 0.2, part["real_step_ms"].astype(float), 0.4, label="measured")
        ax.bar(x + 0.2, part["sim_step_ms"].astype(float), 0.4, label="predicted")
        ax.set_xticks(x, part["method"], rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_ylabel("step time (ms)")
        ax.set_title(f"{model} on {part['cluster'].iloc[0]}")
        ax.legend(fontsize=8)
    seeds = sorted(set(real["seed"].astype(int))) if "seed" in real else []
    fig.suptitle(f"pipelines and data parallelism on local workers: measured and predicted\n"
                 f"one real run per plan (seed {'/'.join(map(str, seeds)) or '?'}'s plan)", fontsize=10)
    _save(fig, path)
    return True



def per_method(results_dir: Path, model: str, cluster: str) -> pd.DataFrame:
    """One case's plans from the committed metrics beside each partition job
    (``results/partition/<model>/<cluster>-<method>-s<seed>.metrics.json``): per method, the seeds, the mean
    and spread of the predicted step time, PipeDream's objective, the agent's best sample (TAPP), the plans
    scored and the search's seconds."""
    rows = []
    for path in sorted((Path(results_dir) / "partition" / model).glob(f"{cluster}-*-s*.metrics.json")):
        rows.append(read_json(path))
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows)
    for column in ("pipedream_objective_ms", "sampled_best_ms", "evaluations"):
        if column not in table:
            table[column] = np.nan
    out = table.groupby("method", sort=False).agg(
        seeds=("seed", "count"), step_ms=("step_time_ms", "mean"), step_std_ms=("step_time_ms", "std"),
        pipedream_objective_ms=("pipedream_objective_ms", "mean"), sampled_best_ms=("sampled_best_ms", "mean"),
        evaluations=("evaluations", "mean"), search_seconds=("search_seconds", "mean"))
    return out.sort_values("step_ms").reset_index().round(3)
