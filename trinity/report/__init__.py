"""The report: the paper's Tables 3-5, its figures and the simulator-vs-real check, from the pipeline's outputs.

`build_report(results, data, out)` reads ``results/search``, ``results/validate`` and the profiled graphs in
``data/`` and writes into ``out`` (``reports/``): table{3,4,5}.{csv,md}, REPORT.md, figures/*.png,
plots/*.csv (DVC's plots) and metrics.json (DVC's metrics).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from trinity.cluster import cluster_from_dict
from trinity.fileio import atomic_write_bytes, write_json
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.report import figures, tables
from trinity.report.paper import TABLES_4_5_NOTE
from trinity.report.results import per_case, search_results, validation_results
from trinity.sim import Simulator

SEARCH_METHODS = ("trinity", "hierarchical")


def _csv(path: Path, table: pd.DataFrame) -> None:
    atomic_write_bytes(path, table.to_csv(index=False).encode())


def build_report(results: Path, data: Path, out: Path) -> dict:
    search = search_results(results)
    cases = per_case(search)
    validated = validation_results(results)
    graphs = {m: load_graph(data / m / "profile" / "graph.json.gz") for m in dict.fromkeys(search["model"])}
    fig_dir, plot_dir = out / "figures", out / "plots"

    t3 = tables.table3({m: (g.n_ops, g.n_edges) for m, g in graphs.items()})
    t4, t5 = tables.table4(cases), tables.table5(cases)
    for name, table in (("table3", t3), ("table4", t4), ("table5", t5)):
        _csv(out / f"{name}.csv", table)
        atomic_write_bytes(out / f"{name}.md", tables.markdown(table).encode())

    best = _best_per_case(cases)
    for (model, cluster), method in best.items():
        _draw_best(graphs[model], search, model, cluster, method, fig_dir)
    for model, cluster in dict.fromkeys(zip(cases["model"], cases["cluster"])):
        histories = _histories(search, model, cluster)
        if histories:
            figures.plot_convergence(histories, fig_dir / f"convergence_{model}_{cluster}.png",
                                     title=f"{model}, {cluster}: search convergence (seed 0)")
    for metric, label, name in (("step_time_ms", "runtime (ms)", "runtime"),
                                ("peak_comm_MB", "peak communication (MB)", "comm"),
                                ("peak_memory_GB", "peak memory (GB)", "memory")):
        figures.plot_bars(cases, metric, label, fig_dir / f"bars_{name}.png")
    if len(validated):
        figures.plot_sim_vs_real_all(validated, fig_dir / "sim_vs_real.png")

    _write_plots(cases, search, validated, plot_dir)
    summary = _summary(cases, best, validated)
    write_json(out / "metrics.json", summary)
    atomic_write_bytes(out / "REPORT.md", _report_md(t3, t4, t5, summary, validated, fig_dir).encode())
    return {"files": sorted(str(p) for p in out.rglob("*") if p.is_file()), "summary": summary}


def _best_per_case(cases: pd.DataFrame) -> dict[tuple[str, str], str]:
    """The method with the lowest mean runtime that fits, per model x cluster."""
    fits = cases[cases["fits"]]
    return {(m, c): part.loc[part["step_time_ms_mean"].idxmin(), "method"]
            for (m, c), part in fits.groupby(["model", "cluster"], sort=False)}


def _draw_best(graph, search: pd.DataFrame, model: str, cluster: str, method: str, fig_dir: Path) -> None:
    """Placement and Gantt chart of the best method's seed-0 (or first) strategy."""
    job = search[(search["model"] == model) & (search["cluster"] == cluster) & (search["method"] == method)].iloc[0]
    folder = Path(job["folder"])
    c = cluster_from_dict(json.loads((folder / "metrics.json").read_text())["cluster_config"], str(folder))
    placement = Strategy.load(folder / "strategy.json").to_array(graph, c, source=str(folder / "strategy.json"))
    res = Simulator(graph, c).simulate(placement, trace=True)
    title = f"{model} on {cluster}: {method}, {res.step_time_us / 1e3:.2f} ms"
    figures.plot_placement(graph, placement, c.device_names, fig_dir / f"placement_{model}_{cluster}.png", title)
    from trinity.plots import plot_gantt

    plot_gantt(res.gantt(graph, c.device_names), fig_dir / f"gantt_{model}_{cluster}.png", title=title,
               transfers=res.transfers_frame(c.device_names))


def _histories(search: pd.DataFrame, model: str, cluster: str) -> dict[str, pd.DataFrame]:
    out = {}
    for method in SEARCH_METHODS:
        jobs = search[(search["model"] == model) & (search["cluster"] == cluster) & (search["method"] == method)]
        if len(jobs) and (Path(jobs.iloc[0]["folder"]) / "history.csv").exists():
            out[method] = pd.read_csv(Path(jobs.iloc[0]["folder"]) / "history.csv")
    return out


def _write_plots(cases: pd.DataFrame, search: pd.DataFrame, validated: pd.DataFrame, plot_dir: Path) -> None:
    """The CSVs dvc.yaml's plots read."""
    methods = cases[cases["fits"]].assign(case=lambda t: t["model"] + "/" + t["cluster"])
    _csv(plot_dir / "methods.csv", methods[["case", "method"]].assign(
        step_time_ms=methods["step_time_ms_mean"].round(3)))
    first = cases.iloc[0]["model"]
    largest = cases[cases["model"] == first].sort_values("devices").iloc[-1]["cluster"]
    histories = _histories(search, first, largest)
    length = max((len(h) for h in histories.values()), default=0)
    curve = pd.DataFrame({"iteration": range(length)})
    for method in SEARCH_METHODS:
        h = histories.get(method)
        curve[method] = h["charts/best_step_time_ms"].reindex(range(length)).to_numpy() if h is not None else None
    _csv(plot_dir / "convergence.csv", curve)
    cols = ["model", "strategy", "sim_step_ms", "real_step_ms"]
    scatter = validated.dropna(subset=["real_step_ms"])[cols] if len(validated) else pd.DataFrame(columns=cols)
    _csv(plot_dir / "sim_vs_real.csv", scatter)


def _summary(cases: pd.DataFrame, best: dict, validated: pd.DataFrame) -> dict:
    summary: dict = {"cases": {}, "validation": {}}
    for (model, cluster), method in best.items():
        row = cases[(cases["model"] == model) & (cases["cluster"] == cluster) & (cases["method"] == method)].iloc[0]
        summary["cases"][f"{model}/{cluster}"] = {"best_method": method,
                                                  "best_step_time_ms": round(float(row["step_time_ms_mean"]), 3)}
    if len(validated):
        for model, part in validated.dropna(subset=["real_step_ms"]).groupby("model"):
            summary["validation"][model] = {"strategies": int(len(part)),
                                            "step_error_median": round(float(part["step_error"].abs().median()), 4)}
    return summary


def _report_md(t3, t4, t5, summary: dict, validated: pd.DataFrame, fig_dir: Path) -> str:
    lines = ["# Trinity: report", "",
             "Regenerated by `make repro` (`dvc repro`); every number below comes from `results/` "
             "(simulated step times in ms on the clusters' device models, peak communication in MB, peak memory "
             "in GB, per device).", "",
             "## Table 3: graph sizes (ours beside the paper's)", "", tables.markdown(t3),
             "## Table 4: runtime, peak communication, peak memory per model x devices x method", "",
             tables.markdown(t4), f"({TABLES_4_5_NOTE}.)", "",
             "## Table 5: Trinity against Hierarchical (negative = Trinity lower)", ""]
    lines += [tables.markdown(t5) if len(t5) else "(no case ran both searches)\n", f"({TABLES_4_5_NOTE}.)", "",
              "## Best method per case", ""]
    lines += [f"- {case}: {v['best_method']} ({v['best_step_time_ms']} ms)" for case, v in summary["cases"].items()]
    lines += ["", "## Simulator vs real", ""]
    if len(validated):
        lines += [f"- {model}: median |step time error| {v['step_error_median']:.1%} over {v['strategies']} "
                  "strategies measured on local TensorFlow workers" for model, v in summary["validation"].items()]
    else:
        lines.append("The validate stage did not run.")
    lines += ["", "## Figures", ""] + [f"- [{name}](figures/{name})" for name in figures.figure_names(fig_dir)]
    return "\n".join(lines) + "\n"
