"""The report's figures, in the paper's spirit: placement by device (Fig. 4), convergence (Fig. 5), bars per
metric (Figs. 6-8) and simulator vs real (Fig. 9). The Gantt chart is `trinity.plots.plot_gantt`."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from trinity.graph.ir import OpGraph
from trinity.plots import _save, method_colours, plain_log_ticks, plt
from trinity.report.results import METHOD_ORDER
from trinity.runtime.validate import held_out_split_rows


def topological_depth(graph: OpGraph) -> np.ndarray:
    """Longest path (in edges) from a source to every op."""
    position = np.empty(graph.n_ops, np.int64)
    position[graph.topological_order()] = np.arange(graph.n_ops)
    src, dst = graph.arrays.src, graph.arrays.dst
    # Edges in topological order of their source: a source's depth is final before its out-edges are read.
    # Plain lists: a Python loop over them is ~10x faster than over numpy scalars (15k ops in ~20 ms).
    edge_order = np.argsort(position[src], kind="stable")
    depth = [0] * graph.n_ops
    for s, d in zip(src[edge_order].tolist(), dst[edge_order].tolist()):
        if depth[s] + 1 > depth[d]:
            depth[d] = depth[s] + 1
    return np.asarray(depth, np.int64)


def layer_positions(depth: np.ndarray) -> np.ndarray:
    """Each op's place within its depth layer, scaled to (0, 1) so every layer spans the height (the wide
    layers, such as the variables at depth 0, would otherwise flatten the rest)."""
    order = np.argsort(depth, kind="stable")
    sizes = np.bincount(depth)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty(len(depth), np.int64)
    rank[order] = np.arange(len(depth)) - starts[depth[order]]
    return (rank + 0.5) / sizes[depth]


def plot_placement(graph: OpGraph, placement: np.ndarray, device_names: list[str], path: str | os.PathLike,
                   title: str = "") -> None:
    """Every op as a dot at (topological depth, place within its depth), coloured by its device (Fig. 4)."""
    depth = topological_depth(graph)
    row = layer_positions(depth)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for d, name in enumerate(device_names):
        mine = placement == d
        if mine.any():
            ax.scatter(depth[mine], row[mine], s=3, color=plt.cm.tab10(d % 10), linewidths=0, rasterized=True,
                       label=f"{name} ({int(mine.sum())} ops)")
    ax.set_xlabel("topological depth (longest path from a source)")
    ax.set_ylabel("place within its depth layer")
    ax.legend(markerscale=4, fontsize=8, loc="upper right")
    ax.set_title(title)
    _save(fig, path)


def plot_convergence(histories: dict[str, pd.DataFrame], path: str | os.PathLike, title: str = "") -> None:
    """Best-so-far and batch-mean simulated step time per iteration for each search method (Fig. 5)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    colours = method_colours(list(histories))
    for method, h in histories.items():
        color = colours[method]
        ax.plot(h["iteration"], h["charts/best_step_time_ms"], color=color, lw=1.6, label=f"{method}: best so far")
        if "charts/step_time_ms_mean" in h:
            ax.plot(h["iteration"], h["charts/step_time_ms_mean"], color=color, lw=0.7, alpha=0.6,
                    label=f"{method}: batch mean")
    ax.set_xlabel("iteration")
    ax.set_ylabel("simulated step time (ms)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9, wrap=True)
    fig.tight_layout()
    _save(fig, path)


def _methods_in_order(present: set[str]) -> list[str]:
    return [m for m in METHOD_ORDER if m in present] + sorted(present - set(METHOD_ORDER))


def search_budget(search: pd.DataFrame) -> str:
    """The budget of the search jobs in ``search`` (one row per job), in simulator calls."""
    calls = pd.to_numeric(search["simulations"], errors="coerce") if "simulations" in search else pd.Series()
    calls = sorted(set(calls[calls > 1].astype(int)))  # a placer simulates its one strategy
    if not calls:
        return "no search budget recorded"
    return f"{calls[0]:,} simulator calls per search" if len(calls) == 1 else \
        f"{calls[0]:,}-{calls[-1]:,} simulator calls per search"


def seeds_and_budget(cases: pd.DataFrame, search: pd.DataFrame) -> str:
    """What a figure over ``cases`` averages: the seed counts per method, and the searches' budget."""
    seeds = sorted(set(cases["seeds"].astype(int))) if "seeds" in cases else []
    return f"{' or '.join(map(str, seeds)) or '?'} seed{'s' if seeds != [1] else ''} per method; " \
           f"{search_budget(search)}"


def plot_bars(cases: pd.DataFrame, metric: str, label: str, path: str | os.PathLike, subtitle: str = "") -> None:
    """One panel per model: a group of bars per method, one bar per cluster, error bars = sample std over
    seeds where a method has several seeds (Figs. 6-8). Methods that do not fit (OOM) have no bar."""
    models = list(dict.fromkeys(cases["model"]))
    n_methods = cases["method"].nunique()
    fig, axes = plt.subplots(1, len(models), figsize=(max(6.0, 1.0 + 0.6 * n_methods) * len(models), 4.4),
                             squeeze=False)
    for ax, model in zip(axes[0], models):
        part = cases[(cases["model"] == model) & cases["fits"]]
        methods = _methods_in_order(set(part["method"]))
        clusters = list(dict.fromkeys(part["cluster"]))
        width = 0.8 / max(len(clusters), 1)
        for j, cluster in enumerate(clusters):
            rows = part[part["cluster"] == cluster].set_index("method").reindex(methods)
            spread = rows[f"{metric}_std"].where(rows["seeds"] > 1)  # one seed: no error bar
            ax.bar(np.arange(len(methods)) + j * width, rows[f"{metric}_mean"], width,
                   yerr=spread if spread.notna().any() else None, label=cluster, capsize=2)
        ax.set_xticks(np.arange(len(methods)) + width * (len(clusters) - 1) / 2, methods, rotation=90, fontsize=8)  # upright
        # labels' boxes never overlap, where 45-degree ones do once methods are many
        ax.set_title(model, fontsize=10)
        ax.set_ylabel(label)
        if clusters:
            ax.legend(title="cluster", fontsize=8, title_fontsize=8)
    fig.suptitle(f"{label}: mean over seeds, error bars the sample std where a method has several"
                 f"{chr(10) + subtitle if subtitle else ''}", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def _measured_spread(ax, part: pd.DataFrame) -> None:
    """Horizontal bars from the first to the third quartile of each strategy's timed steps."""
    if {"real_q1_ms", "real_q3_ms"} <= set(part.columns):
        q = part.dropna(subset=["real_q1_ms", "real_q3_ms"])
        ax.errorbar(q["real_step_ms"], q["sim_step_ms"],
                    xerr=[(q["real_step_ms"] - q["real_q1_ms"]).clip(lower=0), (q["real_q3_ms"] - q["real_step_ms"]).clip(lower=0)],
                    fmt="none", ecolor="grey", elinewidth=0.8, capsize=2, label="measured IQR", zorder=2)


def plot_sim_vs_real_all(measured: pd.DataFrame, path: str | os.PathLike) -> None:
    """Every measured strategy, one panel per model, batch and calibration run (rows: runs): simulated
    against measured step time with the measured interquartile range as error bars, y = x and a ±10%
    band (Fig. 9); held-out split strategies (not in the calibration, over two workers or more) filled,
    the others hollow."""
    batch = measured["batch"] if "batch" in measured else pd.Series(np.nan, index=measured.index)
    run = measured["run"].fillna(1) if "run" in measured else pd.Series(1, index=measured.index)
    panels = list(measured.groupby([measured["model"], batch.fillna(-1)], sort=False))
    runs = sorted(run.unique())
    fig, axes = plt.subplots(len(runs), len(panels), figsize=(5 * len(panels), 4.8 * len(runs)), squeeze=False)
    cells = [(axes[runs.index(r), i], model, b, r, part[run[part.index] == r])
             for i, ((model, b), part) in enumerate(panels) for r in runs]
    for ax, model, b, r, part in cells:
        if not len(part):
            ax.set_axis_off()
            continue
        held = held_out_split_rows(part) if {"calibration_set", "real_crossed_MB"} <= set(part.columns) \
            else pd.Series(True, index=part.index)
        _measured_spread(ax, part)
        ax.scatter(part.loc[held, "real_step_ms"], part.loc[held, "sim_step_ms"], s=26, color="C0",
                   label="held out, split", zorder=3)
        ax.scatter(part.loc[~held, "real_step_ms"], part.loc[~held, "sim_step_ms"], s=26, facecolors="none",
                   edgecolors="C1", label="calibration set or one worker", zorder=3)
        values = part[["real_step_ms", "sim_step_ms"]].to_numpy(float)
        low, top = values.min() / 1.15, values.max() * 1.15
        ax.plot([low, top], [low, top], "k-", lw=0.8, label="y = x")
        ax.fill_between([low, top], [0.9 * low, 0.9 * top], [1.1 * low, 1.1 * top], color="grey", alpha=0.15,
                        label="±10%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, top)
        ax.set_ylim(low, top)
        plain_log_ticks(ax.xaxis, low, top)
        plain_log_ticks(ax.yaxis, low, top)
        ax.set_xlabel("measured step time (ms)")
        ax.set_ylabel("simulated step time (ms)")
        error = part.loc[held, "step_error"].abs().median()
        ax.set_title(f"{model}{'' if b == -1 else f', batch {int(b)}'}{f', run {int(r)}' if len(runs) > 1 else ''}\n"
                     f"{int(held.sum())} held out, split: median |error| {error:.1%}; {int((~held).sum())} others",
                     fontsize=9)
    # one legend for every panel, below them: inside a panel it hides points
    handles, labels = next(ax for ax, *_ in cells if ax.axison).get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05 / len(runs), 1, 1))
    _save(fig, path)
