"""The pipeline's outputs read back as tables: one row per search job, one per validated strategy."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from trinity.errors import TrinityError

#: the order methods appear in, the paper's baselines first
METHOD_ORDER = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct", "hierarchical", "trinity")


def search_results(results: Path) -> pd.DataFrame:
    """Every ``results/search/<model>/<case>/metrics.json``, one row each (with the job's folder)."""
    rows = []
    for path in sorted((results / "search").glob("*/*/metrics.json")):
        row = json.loads(path.read_text())
        row.pop("cluster_config", None)
        rows.append({**row, "folder": str(path.parent)})
    if not rows:
        raise TrinityError("no search results; run the search stage first (dvc repro search)",
                           source=str(results / "search"))
    table = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    table["_order"] = table["method"].map(lambda m: order.get(m, len(order)))
    table = table.sort_values(["model", "devices", "_order", "seed"]).drop(columns="_order")
    return table.reset_index(drop=True)


def validation_results(results: Path) -> pd.DataFrame:
    """Every validated strategy of every model (empty when the validate stage did not run)."""
    frames = []
    for path in sorted((results / "validate").glob("*/results.csv")):
        table = pd.read_csv(path)
        table.insert(0, "model", path.parent.name)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def per_case(search: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample standard deviation (ddof=1) and count over seeds per model x cluster x method."""
    keys = ["model", "cluster", "devices", "method"]
    metrics = ["step_time_ms", "peak_comm_MB", "peak_memory_GB"]
    grouped = search.groupby(keys, sort=False)
    table = grouped[metrics].agg(["mean", "std"])
    table.columns = [f"{m}_{s}" for m, s in table.columns]
    table["seeds"] = grouped.size()
    table["fits"] = grouped["fits"].all()
    table["seconds_per_1000_iterations"] = grouped["seconds_per_1000_iterations"].mean()
    return table.reset_index()
