"""The plain CSVs dvc.yaml's `plots:` section reads (reports/plots/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trinity.runtime.validate import held_out_split_rows

#: the searches whose history.csv the convergence plots read
SEARCH_METHODS = ("trinity", "hierarchical")


def first_seed_job(search: pd.DataFrame, model: str, cluster: str, method: str) -> pd.Series | None:
    """The job of seed 0 (else the lowest seed) of one method on one case; None if it did not run."""
    jobs = search[(search["model"] == model) & (search["cluster"] == cluster) & (search["method"] == method)]
    return jobs.sort_values("seed").iloc[0] if len(jobs) else None


def histories(search: pd.DataFrame, model: str, cluster: str) -> dict[str, pd.DataFrame]:
    """history.csv of the first seed of every search method that ran on the case."""
    out = {}
    for method in SEARCH_METHODS:
        job = first_seed_job(search, model, cluster, method)
        if job is not None and (Path(job["folder"]) / "history.csv").exists():
            out[method] = pd.read_csv(Path(job["folder"]) / "history.csv")
    return out


def methods_frame(cases: pd.DataFrame) -> pd.DataFrame:
    """case, method, mean step time (ms) of every method that fits."""
    fits = cases[cases["fits"]]
    return pd.DataFrame({"case": fits["model"] + "/" + fits["cluster"], "method": fits["method"],
                         "step_time_ms": fits["step_time_ms_mean"].round(3)})


def convergence_frame(search: pd.DataFrame) -> pd.DataFrame:
    """Best-so-far step time per iteration of each search, seed 0, on the first model's largest cluster; a
    method that did not run there has an empty column."""
    model = search["model"].iloc[0]
    cluster = search[search["model"] == model].sort_values("devices", kind="stable")["cluster"].iloc[-1]
    found = histories(search, model, cluster)
    curve = pd.DataFrame({"iteration": pd.Series(dtype="int64")})
    for method, h in found.items():
        curve = curve.merge(h[["iteration", "charts/best_step_time_ms"]].rename(
            columns={"charts/best_step_time_ms": method}), on="iteration", how="outer")
    for method in SEARCH_METHODS:
        if method not in curve:
            curve[method] = pd.Series(dtype="float64")
    return curve[["iteration", *SEARCH_METHODS]].sort_values("iteration").reset_index(drop=True)


def sim_vs_real_frame(measured: pd.DataFrame) -> pd.DataFrame:
    """Every measured strategy (DVC's scatter plot), with its batch and whether it is held out and split."""
    columns = ["model", "batch", "strategy", "sim_step_ms", "real_step_ms", "held_out_split"]
    if not len(measured):
        return pd.DataFrame(columns=columns)
    out = measured.assign(batch=measured["batch"] if "batch" in measured else None)
    out["held_out_split"] = (held_out_split_rows(out) if {"calibration_set", "real_crossed_MB"} <= set(out.columns)
                             else None)
    return out[columns]
