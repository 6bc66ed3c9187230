"""The report's figures, in the paper's spirit: placement by device (Fig. 4), convergence (Fig. 5), bars per
metric (Figs. 6-8), simulator vs real (Fig. 9), and a Gantt chart of a best strategy."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.graph.ir import OpGraph
from trinity.plots import _save, plt
from trinity.report.results import METHOD_ORDER


def plot_placement(graph: OpGraph, placement: np.ndarray, device_names: list[str], path: str | os.PathLike,
                   title: str = "") -> None:
    """Every op as a dot at (depth, its place within its depth), coloured by its device (Fig. 4). Each depth
    spans the height, so a few wide layers (the variables at depth 0) do not flatten the rest."""
    depth = np.zeros(graph.n_ops, np.int64)
    src, dst = graph.arrays.src, graph.arrays.dst
    order = graph.topological_order()
    position = np.empty(graph.n_ops, np.int64)
    position[order] = np.arange(graph.n_ops)
    for e in np.argsort(position[src], kind="stable"):  # edges in topological order of their source
        depth[dst[e]] = max(depth[dst[e]], depth[src[e]] + 1)
    row = np.zeros(graph.n_ops)
    for level in np.unique(depth):
        members = np.flatnonzero(depth == level)
        row[members] = (np.arange(len(members)) + 0.5) / len(members)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for d, name in enumerate(device_names):
        mine = placement == d
        ax.scatter(depth[mine], row[mine], s=3, color=plt.cm.tab10(d % 10), label=f"{name} ({mine.sum()} ops)")
    ax.set_xlabel("depth (longest path from an input)")
    ax.set_ylabel("place within its depth")
    ax.legend(markerscale=4, fontsize=8, loc="upper right")
    ax.set_title(title)
    _save(fig, path)


def plot_convergence(histories: dict[str, pd.DataFrame], path: str | os.PathLike, title: str = "") -> None:
    """Best-so-far and batch-mean simulated step time per iteration for each search method (Fig. 5)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (method, h) in enumerate(histories.items()):
        color = plt.cm.tab10(i)
        ax.plot(h["iteration"], h["charts/best_step_time_ms"], color=color, lw=1.6, label=f"{method}: best")
        ax.plot(h["iteration"], h["charts/step_time_ms_mean"], color=color, lw=0.7, alpha=0.6,
                label=f"{method}: batch mean")
    ax.set_xlabel("iteration")
    ax.set_ylabel("simulated step time (ms)")
    ax.legend(fontsize=8)
    ax.set_title(title)
    _save(fig, path)


def plot_bars(cases: pd.DataFrame, metric: str, label: str, path: str | os.PathLike) -> None:
    """One panel per model: bars per method, grouped by cluster, error bars = std over seeds (Figs. 6-8)."""
    models = list(dict.fromkeys(cases["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        part = cases[(cases["model"] == model) & cases["fits"]]
        methods = [m for m in METHOD_ORDER if m in set(part["method"])] + sorted(set(part["method"]) - set(METHOD_ORDER))
        clusters = list(dict.fromkeys(part["cluster"]))
        width = 0.8 / max(len(clusters), 1)
        for j, cluster in enumerate(clusters):
            rows = part[part["cluster"] == cluster].set_index("method").reindex(methods)
            ax.bar(np.arange(len(methods)) + j * width, rows[f"{metric}_mean"], width,
                   yerr=rows[f"{metric}_std"].fillna(0), label=cluster, capsize=2)
        ax.set_xticks(np.arange(len(methods)) + width * (len(clusters) - 1) / 2, methods, rotation=45)
        ax.set_title(model)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def plot_sim_vs_real_all(validated: pd.DataFrame, path: str | os.PathLike) -> None:
    """Every validated strategy of every model: simulated against measured step time (Fig. 9)."""
    measured = validated.dropna(subset=["real_step_ms"])
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for model, part in measured.groupby("model"):
        ax.scatter(part["real_step_ms"], part["sim_step_ms"], s=24, label=model, alpha=0.85)
    top = float(measured[["real_step_ms", "sim_step_ms"]].max().max()) * 1.08 if len(measured) else 1.0
    ax.plot([0, top], [0, top], "k-", lw=0.8)
    ax.fill_between([0, top], [0, 0.9 * top], [0, 1.1 * top], color="grey", alpha=0.15, label="±10%")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("simulated step time (ms)")
    median = float(measured["step_error"].abs().median()) if len(measured) else float("nan")
    ax.set_title(f"simulator vs real: median |error| {median:.1%}")
    ax.legend(fontsize=8)
    _save(fig, path)


def figure_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.png"))
