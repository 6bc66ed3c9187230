"""Figures people look at: placer comparisons and per-device Gantt charts."""

from __future__ import annotations

import io
import os

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from trinity.fileio import atomic_write_bytes  # noqa: E402


#: set by tests (and anyone checking a report): every figure saved is checked for overlapping text, and
#: what overlaps is appended here as ``(path, text, other text)``
check_text: bool = False
text_overlaps_found: list[tuple[str, str, str]] = []


def _save(fig, path: str | os.PathLike) -> None:
    if check_text:
        text_overlaps_found.extend((str(path), a, b) for a, b in text_overlaps(fig))
    buf = io.BytesIO()
    fig.savefig(buf, format=str(path).rsplit(".", 1)[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _texts(fig) -> list:
    """Every visible, non-empty piece of text of a figure: titles, axis and tick labels, legends, notes."""
    found = list(fig.texts)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        found += [*_drawn_tick_labels(ax.xaxis), *_drawn_tick_labels(ax.yaxis)]
        legend = ax.get_legend()
        if legend is not None:
            found += [*legend.get_texts(), legend.get_title()]
    for legend in fig.legends:
        found += [*legend.get_texts(), legend.get_title()]
    return [t for t in found if t.get_visible() and t.get_text().strip()]


def _drawn_tick_labels(axis) -> list:
    """The tick labels an axis draws: those of ticks within its view limits (the others exist, unseen)."""
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(high - low), 1e-300)
    ticks = [t for t in axis.get_major_ticks() + axis.get_minor_ticks() if low - slack <= t.get_loc() <= high + slack]
    return [label for t in ticks for label in (t.label1, t.label2) if label.get_visible()]


def text_overlaps(fig, tolerance_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts of ``fig`` that overlap as drawn at the saved resolution (tick labels crowding each
    other, a label over a title, two notes on one spot)."""
    fig.set_dpi(120)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for text in _texts(fig):
        box = text.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((text.get_text(), box.expanded(1, 1).padded(-tolerance_px)))
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]


def method_colours(methods) -> dict[str, tuple]:
    """A distinct colour per method (up to 20), the same method always the same colour within a figure."""
    palette = plt.cm.tab20.colors if len(methods) > 10 else plt.cm.tab10.colors
    return {m: palette[i % len(palette)] for i, m in enumerate(methods)}


def round_log_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round ticks for a log axis from ``low`` to ``high``: powers of ten, then 1-2-5, then
    finer mantissas until at least three fall in range."""
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    ticks: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5, 7), tuple(range(1, 10))):
        ticks = [float(f"{m * 10.0 ** k:.12g}") for k in decades for m in mantissas if low <= m * 10.0 ** k <= high]
        if len(ticks) >= 3:
            break
    if len(ticks) < 2:  # a range narrower than one step of a digit: two significant digits
        ticks = sorted({t for t in (float(f"{v:.2g}") for v in np.geomspace(low, high, count)) if low <= t <= high})
    ticks = ticks[::-(-len(ticks) // count)] if len(ticks) > count else ticks
    # labels crowd where mantissas bunch (800, 900, 1000): keep ticks at least 1/(count+1) of the axis apart
    gap, kept = np.log10(high / low) / (count + 1), ticks[:1]
    for t in ticks[1:]:
        if np.log10(t / kept[-1]) >= gap:
            kept.append(t)
    return kept


def plain_log_ticks(axis, low: float, high: float, count: int = 5) -> None:
    """Round ticks on a log axis from ``low`` to ``high``, labelled as plain numbers (2, 5, 10), not
    2x10^0; no minor labels."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    axis.set_ticks(round_log_ticks(low, high, count))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def plot_comparison(table: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Step time, peak communication and peak memory per placer, one bar group per cluster."""
    metrics = [("step_time_ms", "step time (ms)"), ("peak_comm_MB", "peak communication (MB)"),
               ("peak_memory_GB", "peak memory (GB)")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4))
    for ax, (col, label) in zip(axes, metrics):
        pivot = table.pivot(index="placer", columns="cluster", values=col)
        pivot.plot.bar(ax=ax, rot=45)
        ax.set_ylabel(label)
        ax.set_xlabel("")
        ax.legend(title="cluster", fontsize=8, loc="lower right", framealpha=0.8)
    fig.suptitle(title)
    _save(fig, path)


def plot_search_table(table: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Simulated step time of every method, one panel per graph and cluster; the searches in colour.

    ``table`` has columns graph, cluster, method, step_time_ms (benchmarks/search_table.py).
    """
    cases = list(table.groupby(["graph", "cluster"], sort=False))
    cols = min(len(cases), 2)
    rows = -(-len(cases) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3 * rows), squeeze=False)
    for ax, ((graph, cluster), case) in zip(axes.flat, cases):
        colors = ["tab:red" if m.startswith("trinity") else "tab:orange" if m.startswith("hierarchical")
                  else "tab:grey" for m in case["method"]]
        ax.barh(case["method"], case["step_time_ms"], color=colors)
        best = case["step_time_ms"].min()
        ax.axvline(best, color="black", lw=0.6, ls="--")
        ax.set_xlim(0, case["step_time_ms"].max() * 1.05)
        ax.invert_yaxis()
        ax.set_title(f"{graph}, {cluster} (best {best:.1f} ms)", fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(cases):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("simulated step time (ms)")
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_gantt(gantt: pd.DataFrame, path: str | os.PathLike, title: str = "",
               transfers: pd.DataFrame | None = None) -> None:
    """Ops as bars per device over time (from `SimResult.gantt`), transfers on a row per sender."""
    devices = sorted(gantt["device"].unique())
    rows = devices + ([f"{d} send" for d in devices] if transfers is not None else [])
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(rows) + 1.5))
    # a distinct colour for each of the op types that take the most time, one grey for the rest
    busy = (gantt["end_us"] - gantt["start_us"]).groupby(gantt["type"]).sum().sort_values(ascending=False)
    shown = list(busy.index[:12])
    colors = {t: "lightgrey" for t in busy.index} | {t: plt.cm.tab20(i) for i, t in enumerate(shown)}
    for y, dev in enumerate(devices):
        ops = gantt[(gantt["device"] == dev) & (gantt["end_us"] > gantt["start_us"])]
        ax.broken_barh(list(zip(ops["start_us"] / 1e3, (ops["end_us"] - ops["start_us"]) / 1e3)), (y - 0.4, 0.8),
                       facecolors=[colors[t] for t in ops["type"]])
    if transfers is not None:
        for y, dev in enumerate(devices, start=len(devices)):
            xs = transfers[transfers["src"] == dev]
            ax.broken_barh(list(zip(xs["start_us"] / 1e3, (xs["end_us"] - xs["start_us"]) / 1e3)),
                           (y - 0.4, 0.8), facecolors="dimgrey")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    handles = [Patch(color=colors[t], label=t) for t in shown]
    if len(busy) > len(shown):
        handles.append(Patch(color="lightgrey", label=f"{len(busy) - len(shown)} other op types"))
    if transfers is not None:
        handles.append(Patch(color="dimgrey", label="transfer (send rows)"))
    ax.legend(handles=handles, title="op type", fontsize=7, title_fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    _save(fig, path)


def plot_search_curve(history: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Search progress: batch-mean and best simulated step time, and mean reward, per iteration."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax1.plot(history["iteration"], history["charts/step_time_ms_mean"], lw=0.8, label="batch mean")
    ax1.plot(history["iteration"], history["charts/best_step_time_ms"], lw=1.5, label="best so far")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("simulated step time (ms)")
    ax1.legend()
    ax2.plot(history["iteration"], history["charts/reward_mean"], lw=0.8)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("mean reward")
    fig.suptitle(title)
    _save(fig, path)


def plot_sim_vs_real(table: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """The paper's Figure 9: simulated against measured step time (and bytes crossed), one dot per strategy."""
    measured = table.dropna(subset=["real_step_ms"])
    panels = [("real_step_ms", "sim_step_ms", "step time (ms)"), ("real_crossed_MB", "sim_comm_MB", "bytes crossed (MB)")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for ax, (real, sim, label) in zip(axes, panels):
        by_source = measured.groupby("source") if "source" in measured else [("", measured)]
        if real == "real_step_ms" and {"real_q1_ms", "real_q3_ms"} <= set(measured.columns):  # measured IQR
            ax.errorbar(measured[real], measured[sim], fmt="none", ecolor="grey", elinewidth=0.8, capsize=2,
                        xerr=[(measured[real] - measured["real_q1_ms"]).clip(lower=0),
                              (measured["real_q3_ms"] - measured[real]).clip(lower=0)], label="measured IQR")
        for source, part in by_source:
            ax.scatter(part[real], part[sim], s=22, label=source, alpha=0.8, zorder=3)
        top = max(float(measured[[real, sim]].max().max()), 1e-9) * 1.08
        ax.plot([0, top], [0, top], "k-", lw=0.8)
        ax.fill_between([0, top], [0, 0.9 * top], [0, 1.1 * top], color="grey", alpha=0.15, label="±10%")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(title)
    _save(fig, path)
