"""The pipeline's outputs read back as tables: one row per search job, one per case, one per validated strategy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trinity.errors import TrinityError
from trinity.fileio import read_json

#: the order methods appear in, the paper's baselines first
METHOD_ORDER = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct", "annealing", "annealing-long",
                "annealing-scratch", "hierarchical", "hierarchical-warm", "trinity", "trinity-warm", "trinity-runtime",
                "learned-list", "optimum")
METRICS = ("step_time_ms", "peak_comm_MB", "peak_memory_GB")


def search_results(results: Path) -> pd.DataFrame:
    """One row per search job's ``metrics.json`` (with the job's folder). Both layouts are read:
    ``search/<model>/<cluster>-<method>-s<seed>/`` (dvc.yaml's) and ``search/<model>-<cluster>-<method>-s<seed>/``;
    the row's keys come from the file, not the folder name."""
    search = results / "search"
    paths = sorted(search.glob("*/*/metrics.json"))  # search/<model>/<cluster>-<method>-s<seed>/
    rows = []
    for path in paths:
        row = read_json(path)
        if not isinstance(row, dict) or not {"model", "cluster", "method", "seed", *METRICS} <= row.keys():
            raise TrinityError("not a search job's metrics (needs model, cluster, method, seed, step_time_ms, "
                               "peak_comm_MB, peak_memory_GB)", source=str(path))
        row = {k: v for k, v in row.items() if not isinstance(v, (dict, list))}  # cluster_config stays in the file
        if row.get("infeasible"):  # e.g. the exact optimum of a graph too large to enumerate: nothing to report
            continue
        rows.append({**row, "folder": str(path.parent)})
    if not rows:
        raise TrinityError(f"no search results in {search}; run the search stage first (dvc repro search)",
                           source=str(search))
    table = pd.DataFrame(rows)
    for column, default in (("fits", True), ("devices", 0), ("seconds_per_1000_iterations", np.nan)):
        if column not in table:
            table[column] = default
    table["fits"] = table["fits"].fillna(True).astype(bool)
    table["seconds_per_1000_iterations"] = pd.to_numeric(table["seconds_per_1000_iterations"], errors="coerce")
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    table["_order"] = table["method"].map(lambda m: order.get(m, len(order)))
    table = table.sort_values(["model", "devices", "cluster", "_order", "method", "seed"]).drop(columns="_order")
    return table.reset_index(drop=True)


def per_case(search: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample standard deviation (ddof=1; NaN for one seed) and count over seeds per model x cluster x
    method. A method fits where any seed fits; its statistics are then over the fitting seeds only, and
    ``oom_seeds`` counts the others."""
    rows = []
    for (model, cluster, devices, method), part in search.groupby(["model", "cluster", "devices", "method"],
                                                                  sort=False):
        fitting = part[part["fits"]]
        used = fitting if len(fitting) else part
        row = {"model": model, "cluster": cluster, "devices": devices, "method": method,
               "seeds": len(used), "oom_seeds": len(part) - len(fitting), "fits": bool(len(fitting))}
        for metric in METRICS:
            row[f"{metric}_mean"] = used[metric].mean()
            row[f"{metric}_std"] = used[metric].std(ddof=1)
        row["step_time_ms_min"], row["step_time_ms_max"] = used["step_time_ms"].min(), used["step_time_ms"].max()
        row["seconds_per_1000_iterations"] = part["seconds_per_1000_iterations"].mean()
        for column in ("search_seconds", "simulations", "lower_bound_ms", "busiest_share"):
            row[column] = pd.to_numeric(part[column], errors="coerce").mean() if column in part else np.nan
        best = used.loc[used["step_time_ms"].idxmin()]
        row["best_seed"], row["best_folder"] = best["seed"], best["folder"]
        rows.append(row)
    return pd.DataFrame(rows)


def validation_results(results: Path) -> pd.DataFrame:
    """Every validated strategy of every model, batch and run (``validate/<model>/results.csv`` at the
    model's own batch, ``validate/<model>/batch<b>/results.csv`` at others, the same under ``run<r>/`` for
    every run after the first); empty when the validate stage did not run."""
    frames = []
    folder = results / "validate"
    paths = [p for pattern in ("*/results.csv", "*/batch*/results.csv", "*/run*/results.csv",
                               "*/run*/batch*/results.csv") for p in sorted(folder.glob(pattern))]
    for path in paths:
        table = pd.read_csv(path)
        missing = {"strategy", "sim_step_ms", "real_step_ms"} - set(table.columns)
        if missing:
            raise TrinityError(f"missing columns {', '.join(sorted(missing))}", source=str(path))
        if "step_error" not in table:
            table["step_error"] = (table["sim_step_ms"] - table["real_step_ms"]) / table["real_step_ms"]
        if "batch" not in table:
            table.insert(0, "batch", np.nan)
        if "run" not in table:
            table.insert(1, "run", 1)
        model = path.parent
        while model.parent != folder:  # up from batch<b>/ and run<r>/
            model = model.parent
        table.insert(0, "model", model.name)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def measured(validated: pd.DataFrame) -> pd.DataFrame:
    """The validated strategies that have a real measurement."""
    return validated.dropna(subset=["real_step_ms"]) if len(validated) else validated
