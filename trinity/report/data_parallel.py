"""The data-parallel family's results (``results/train/<method>-s<seed>/``): one row per run, a summary
per method against DDP, and validation loss against wall time."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from trinity.errors import TrinityError
from trinity.fileio import read_json
from trinity.plots import _save, method_colours, plain_log_ticks, plt

ORDER = ("ddp", "ps", "daso", "hps")
COLUMNS = ["method", "seed", "data", "reached_target", "time_to_target_s", "train_time_s", "final_val_loss",
           "final_val_acc", "sent_MB"]


def runs(results: Path) -> tuple[pd.DataFrame, dict[tuple[str, int], pd.DataFrame]]:
    """(one row per run, its loss curve by (method, seed)); empty when the train stage did not run."""
    rows, curves = [], {}
    for path in sorted((Path(results) / "train").glob("*/result.json")):
        r = read_json(path)
        if not isinstance(r, dict) or not {"method", "seed", "curve", "sent_bytes"} <= r.keys():
            raise TrinityError("not a data-parallel run's result (needs method, seed, curve, sent_bytes)",
                               source=str(path))
        rows.append({"method": r["method"], "seed": r["seed"], "data": r.get("data"),
                     "reached_target": r.get("time_to_target_s") is not None,
                     "time_to_target_s": r.get("time_to_target_s"), "train_time_s": r.get("train_time_s"),
                     "final_val_loss": r.get("final_val_loss"), "final_val_acc": r.get("final_val_acc"),
                     "sent_MB": r["sent_bytes"] / 1e6})
        curves[(r["method"], r["seed"])] = pd.DataFrame(r["curve"])
    table = pd.DataFrame(rows, columns=COLUMNS)
    order = {m: i for i, m in enumerate(ORDER)}
    if len(table):
        table = table.sort_values(["method", "seed"], key=lambda c: c.map(order) if c.name == "method" else c)
    return table.reset_index(drop=True), curves


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per method: runs reaching the target, mean and std of time to target (over the runs that reached it),
    training time, accuracy and bytes, and each mean as a ratio to DDP's (< 1: less than DDP)."""
    rows = []
    for method, part in table.groupby("method", sort=False):
        reached = part[part["reached_target"]]
        rows.append({"method": method, "runs": len(part), "reached": len(reached),
                     "time_to_target_s": reached["time_to_target_s"].mean(),
                     "time_to_target_std_s": reached["time_to_target_s"].std(ddof=1),
                     "train_time_s": part["train_time_s"].mean(), "train_time_std_s": part["train_time_s"].std(ddof=1),
                     "final_val_acc": part["final_val_acc"].mean(),
                     "final_val_acc_std": part["final_val_acc"].std(ddof=1),
                     "sent_MB": part["sent_MB"].mean()})
    out = pd.DataFrame(rows)
    if len(out) and "ddp" in set(out["method"]):
        ddp = out.set_index("method").loc["ddp"]
        for column in ("time_to_target_s", "train_time_s", "sent_MB"):
            out[f"{column}_vs_ddp"] = out[column] / ddp[column]
    return out.round(4)


def setup(config: dict) -> str:
    """The runs' setting in one sentence, from a result's training config."""
    if not config:
        return ""
    link = config.get("link") or {}
    slow = ", ".join(str(r) for r in config.get("slow_ranks", [])) or "none"
    between = (f"each node a network namespace whose port the kernel shapes to {link.get('bandwidth_MBps')} MB/s "
               f"(tc tbf) + {link.get('latency_ms')} ms" if link else "every rank on loopback")
    return (f"{config.get('nproc')} local processes in nodes of {config.get('procs_per_node')}, pinned to the "
            f"machine's cores round robin; worker(s) {slow} slowed {config.get('slowdown')}x (each busy-computes "
            f"(x - 1) times its compute time, holding its core); between nodes {between}; "
            f"{config.get('data')} data, target validation loss {config.get('target_val_loss')}, "
            f"{config.get('epochs')} epochs.")


def plot_loss_vs_time(curves: dict[tuple[str, int], pd.DataFrame], target: float | None,
                      path: str | os.PathLike) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    methods = [m for m in ORDER if any(k[0] == m for k in curves)] + \
        sorted({k[0] for k in curves} - set(ORDER))
    colours = method_colours(methods)
    for method in methods:
        for k, (seed, curve) in enumerate(sorted(((s, c) for (m, s), c in curves.items() if m == method),
                                                 key=lambda sc: sc[0])):
            ax.plot(curve["time_s"], curve["val_loss"], color=colours[method], lw=1.2, alpha=0.8,
                    label=method if k == 0 else None)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=1, label="target")
    ax.set_yscale("log")
    losses = pd.concat([c["val_loss"] for c in curves.values()] + ([pd.Series([target])] if target else []))
    losses = losses[losses > 0]
    if len(losses):
        low, high = losses.min() / 1.1, losses.max() * 1.1
        ax.set_ylim(low, high)
        plain_log_ticks(ax.yaxis, low, high, count=6)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("validation loss")
    seeds = len({seed for _, seed in curves})
    epochs = max((int(c["epoch"].max()) + 1 for c in curves.values() if "epoch" in c and len(c)), default=0)
    ax.set_title(f"data parallelism on local workers: validation loss against wall time\n"
                 f"{seeds} seed{'s' if seeds != 1 else ''} per method (one line each), {epochs} epochs", fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, path)
