"""The evaluation a reviewer asks for, per case: every method beside the best placer, the exact optimum
and the lower bound, as mean and spread over seeds with wall time and simulator calls; a method is
said to win only where every seed beats the best placer. And the time-to-quality figure per case."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from trinity.plots import _save, plt

#: seeded methods, in the order the table lists them
SEEDED = ("annealing", "annealing-long", "hierarchical", "hierarchical-warm", "trinity", "trinity-warm",
          "trinity-runtime")
PLACER_EXCLUDED = ("optimum",) + SEEDED  # what is not "a placer" when picking the best placer
#: methods that start from the best placer's strategy (by reward): not above it by construction
STARTS_AT_BEST = ("annealing", "annealing-long", "hierarchical-warm", "trinity-warm", "trinity-runtime")


def _r(value, digits: int = 3):
    return None if value is None or not isinstance(value, (int, float)) or not math.isfinite(value) \
        else round(float(value), digits)


def evaluation_table(cases: pd.DataFrame) -> pd.DataFrame:
    """One block of rows per model x cluster (`per_case` rows in, one row per entry out)."""
    rows = []
    for (model, cluster), case in cases.groupby(["model", "cluster"], sort=False):
        by = case.set_index("method")
        placers = case[~case["method"].isin(PLACER_EXCLUDED) & case["fits"]]
        best = placers.loc[placers["step_time_ms_mean"].idxmin()] if len(placers) else None
        optimum = by.loc["optimum"] if "optimum" in by.index and by.loc["optimum"]["fits"] else None
        base = {"model": model, "cluster": cluster}

        def row(entry: str, method: str, c: pd.Series) -> dict:
            mean = c["step_time_ms_mean"]
            verdict = ""
            if best is not None and entry in SEEDED and c["fits"]:
                if c["step_time_ms_max"] < best["step_time_ms_mean"]:
                    verdict = ("below on every seed (started from a placer)" if entry in STARTS_AT_BEST
                               else "win (every seed below)")
                elif c["step_time_ms_min"] > best["step_time_ms_mean"]:
                    verdict = "loss (every seed above)"
                else:
                    verdict = "within spread"
            return {**base, "entry": entry, "method": method,
                    "seeds": int(c["seeds"]), "fits": bool(c["fits"]),
                    "step_time_ms": _r(mean), "step_time_std_ms": _r(c["step_time_ms_std"]),
                    "peak_comm_MB": _r(c["peak_comm_MB_mean"]), "peak_comm_std_MB": _r(c["peak_comm_MB_std"]),
                    "peak_memory_GB": _r(c["peak_memory_GB_mean"], 4),
                    "peak_memory_std_GB": _r(c["peak_memory_GB_std"], 4),
                    "wall_s": _r(c.get("search_seconds"), 1), "simulator_calls": _r(c.get("simulations"), 0),
                    "vs_best_placer_pct": _r(100 * (mean / best["step_time_ms_mean"] - 1), 2)
                    if best is not None and c["fits"] else None,
                    "vs_optimum_pct": _r(100 * (mean / optimum["step_time_ms_mean"] - 1), 2)
                    if optimum is not None and c["fits"] else None,
                    "verdict": verdict}

        if best is not None:
            rows.append(row("best placer", best["method"], best))
        for method in SEEDED:
            if method in by.index:
                rows.append(row(method, method, by.loc[method]))
        if optimum is not None:
            rows.append(row("exact optimum", "optimum", optimum))
        lb = case["lower_bound_ms"].dropna()
        if len(lb):
            rows.append({**base, "entry": "lower bound", "method": "", "step_time_ms": _r(float(lb.iloc[0]))})
    return pd.DataFrame(rows)


def plot_time_to_quality(search: pd.DataFrame, cases: pd.DataFrame, model: str, cluster: str,
                         path: str | os.PathLike) -> bool:
    """Best simulated step time so far against wall time, every seed of every seeded method; the best
    placer, the exact optimum and the lower bound as lines. False when no history exists."""
    jobs = search[(search["model"] == model) & (search["cluster"] == cluster) & search["method"].isin(SEEDED)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for i, method in enumerate(SEEDED):
        for k, (_, job) in enumerate(jobs[jobs["method"] == method].sort_values("seed").iterrows()):
            file = Path(job["folder"]) / "history.csv"
            if not file.exists():
                continue
            h = pd.read_csv(file)
            if not {"charts/seconds", "charts/best_step_time_ms"} <= set(h.columns) or not len(h):
                continue
            ax.step(h["charts/seconds"], h["charts/best_step_time_ms"], where="post", color=plt.cm.tab10(i),
                    lw=1.2, alpha=0.8, label=method if k == 0 else None)
            drawn = True
    case = cases[(cases["model"] == model) & (cases["cluster"] == cluster)]
    placers = case[~case["method"].isin(PLACER_EXCLUDED) & case["fits"]]
    if len(placers):
        best = placers.loc[placers["step_time_ms_mean"].idxmin()]
        ax.axhline(best["step_time_ms_mean"], color="black", ls="--", lw=1, label=f"best placer ({best['method']})")
    opt = case[(case["method"] == "optimum") & case["fits"]]
    if len(opt):
        ax.axhline(opt["step_time_ms_mean"].iloc[0], color="green", ls=":", lw=1.2, label="exact optimum")
    if case["lower_bound_ms"].notna().any():
        ax.axhline(case["lower_bound_ms"].dropna().iloc[0], color="grey", ls="-.", lw=1, label="lower bound")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("search wall time (s; warm-start imitation not counted)")
    ax.set_ylabel("best simulated step time so far (ms)")
    ax.set_title(f"{model} on {cluster}: time to quality, every seed")
    ax.legend(fontsize=7, loc="upper right")
    _save(fig, path)
    return drawn
