"""The report: the paper's Tables 3-5, its figures and the simulator-vs-real check, from the pipeline's outputs.

`build_report(results, data, out)` reads ``results/search`` (and the paper regime's ``results/regime/search``),
``results/validate`` and the profiled graphs in
``data/`` and writes into ``out`` (``reports/``): table{3,4,5}.{csv,md}, REPORT.md, figures/*.png,
plots/*.csv (DVC's plots) and metrics.json (DVC's metrics).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trinity.cluster import cluster_from_dict, load_cluster
from trinity.errors import TrinityError
from trinity.fileio import atomic_write_bytes, read_json, write_json
from trinity.graph import load_graph
from trinity.graph.ir import OpGraph
from trinity.placement import Strategy
from trinity.plots import plot_gantt
from trinity.report import data_parallel, evaluation, families, figures, pipeline_parallel, plotdata, summary, tables
from trinity.report.results import measured, per_case, search_results, validation_results
from trinity.sim import Simulator

__all__ = ["build_report", "profiled_graph_path"]


def profiled_graph_path(data: Path, model: str) -> Path:
    """The profile stage's graph, ``data/<model>/profile/graph.json.gz``."""
    path = data / model / "profile" / "graph.json.gz"
    if not path.exists():
        raise TrinityError(f"missing; run the profile stage first (dvc repro profile@{model})", source=str(path))
    return path


class _Writer:
    """Writes the report's files atomically and remembers them."""

    def __init__(self, out: Path):
        self.out, self.paths = out, []

    def path(self, name: str) -> Path:
        self.paths.append(self.out / name)
        return self.out / name

    def text(self, name: str, text: str) -> None:
        atomic_write_bytes(self.path(name), text.encode())

    def csv(self, name: str, table: pd.DataFrame) -> None:
        self.text(name, table.to_csv(index=False))


def _only(frame: pd.DataFrame, **allowed) -> pd.Series:
    """Rows of ``frame`` whose every named column holds one of the allowed values."""
    keep = pd.Series(True, index=frame.index)
    for column, values in allowed.items():
        keep &= frame[column].isin(list(values))
    return keep


def _searched_in(search: pd.DataFrame, run: dict) -> pd.DataFrame:
    """The search results ``run`` asks for (placers once, at seed 0; searches per seed), its regime's included:
    results an earlier run of the same experiment left behind stay out of the report."""
    keep = pd.Series(False, index=search.index)
    for part in (run, run.get("regime") or {}):
        if not part:
            continue
        cases = dict(model=part.get("models") or [], cluster=part.get("clusters") or [])
        keep |= _only(search, **cases, method=part.get("placers") or [], seed=[0])
        keep |= _only(search, **cases, method=part.get("searches") or [], seed=part.get("seeds") or [])
    return search[keep].reset_index(drop=True)


def build_report(results: Path, data: Path, out: Path, run: dict | None = None, preamble: str = "") -> dict:
    """Write the report into ``out``; returns ``{"files": [paths written], "summary": metrics.json's dict}``.

    ``run`` (the composed ``run`` section) limits the report to what it lists; ``preamble`` opens REPORT.md
    (what was run: `trinity.report.provenance`)."""
    results, data, out = Path(results), Path(data), Path(out)
    search = search_results(results)
    # the paper's regime: its own stages and results folder (dvc.yaml)
    if any((results / "regime" / "search").glob("*/*/metrics.json")):
        search = pd.concat([search, search_results(results / "regime")], ignore_index=True)
    if run is not None:
        search = _searched_in(search, run)
        if not len(search):
            raise TrinityError("no search result of what `run` lists; run the place and search stages first",
                               source=str(results / "search"))
    cases = per_case(search)
    validated = validation_results(results)
    validation_ran = any((results / "validate").glob("*/results.csv"))
    checked = measured(validated)
    graphs = {m: load_graph(profiled_graph_path(data, m)) for m in dict.fromkeys(search["model"])}
    best = summary.best_per_case(cases)
    w = _Writer(out)

    t3 = tables.table3({m: (g.n_ops, g.n_edges) for m, g in graphs.items()})
    t4, t5 = tables.table4(cases), tables.table5(cases)
    ev = evaluation.evaluation_table(cases, search, evaluation.comm_bounds(results))  # bounds: `make bounds`
    costs = _cost_sources(graphs, cases)
    for name, table in (("table3", t3), ("table4", t4), ("table5", t5), ("evaluation", ev), ("costs", costs)):
        w.csv(f"{name}.csv", table)
        w.text(f"{name}.md", tables.markdown(table))

    for _, case in best.iterrows():
        _draw_best(graphs[case["model"]], case, w)
    for model, cluster in dict.fromkeys(zip(cases["model"], cases["cluster"])):
        evaluation.plot_time_to_quality(search, cases, model, cluster,
                                        w.path(f"figures/time_to_quality_{model}_{cluster}.png"))
        found = plotdata.histories(search, model, cluster)
        if found:
            jobs = search[(search["model"] == model) & (search["cluster"] == cluster) &
                          search["method"].isin(list(found))]
            figures.plot_convergence(found, w.path(f"figures/convergence_{model}_{cluster}.png"),
                                     title=f"{model} on {cluster}: search convergence, one seed (the first) of "
                                           f"{jobs['seed'].nunique()}; {figures.search_budget(jobs)}")
    tradeoff = evaluation.reward_tradeoff(search)  # written even when empty: DVC expects the file
    w.csv("reward_tradeoff.csv", tradeoff)
    w.text("reward_tradeoff.md", tables.markdown(tradeoff) if len(tradeoff) else
           "No case ran both trinity-warm and trinity-runtime (run.regime).\n")
    for model, cluster in evaluation.tradeoff_cases(search):
        evaluation.plot_pareto(search, model, cluster, w.path(f"figures/pareto_{model}_{cluster}.png"))
    for metric, label, name in (("step_time_ms", "runtime (ms)", "runtime"),
                                ("peak_comm_MB", "peak communication (MB)", "comm"),
                                ("peak_memory_GB", "peak memory (GB)", "memory")):
        figures.plot_bars(cases, metric, label, w.path(f"figures/bars_{name}.png"),
                          subtitle=figures.seeds_and_budget(cases, search))
    if len(checked):
        figures.plot_sim_vs_real_all(checked, w.path("figures/sim_vs_real.png"))

    w.csv("plots/methods.csv", plotdata.methods_frame(cases))
    w.csv("plots/convergence.csv", plotdata.convergence_frame(search))
    w.csv("plots/sim_vs_real.csv", plotdata.sim_vs_real_frame(checked))
    errors = summary.validation_errors(checked)  # per model and batch; written even when empty (DVC's output)
    w.csv("validation.csv", pd.DataFrame([{"case": case, **v} for case, v in errors.items()]))

    dp_runs, dp_curves = data_parallel.runs(results)
    if run is not None and len(dp_runs):
        dp = run.get("data_parallel") or {}
        dp_runs = dp_runs[_only(dp_runs, method=dp.get("methods") or [], seed=dp.get("seeds") or [])]
        dp_curves = {key: curve for key, curve in dp_curves.items() if key in set(zip(dp_runs.method, dp_runs.seed))}
    dp_summary = data_parallel.summary(dp_runs) if len(dp_runs) else pd.DataFrame()
    dp_setup = ""
    if len(dp_runs):
        w.csv("data_parallel.csv", dp_runs)
        w.csv("data_parallel_summary.csv", dp_summary)
        first = read_json(next((results / "train").glob("*/result.json")))
        data_parallel.plot_loss_vs_time(dp_curves, first.get("target_val_loss"),
                                        w.path("figures/data_parallel_loss_vs_time.png"))
        dp_setup = data_parallel.setup(first.get("config") or {})

    pp_plans = pipeline_parallel.results(results)
    if run is not None and len(pp_plans):
        pp = run.get("pipeline_parallel") or {}
        pp_plans = pp_plans[_only(pp_plans, model=pp.get("models") or [], cluster=pp.get("clusters") or [],
                                  method=pp.get("methods") or [], seed=pp.get("seeds") or [])]
    pp_summary = pipeline_parallel.summary(pp_plans) if len(pp_plans) else pd.DataFrame()
    if len(pp_plans):
        w.csv("pipeline_parallel.csv", pp_plans)
        w.csv("pipeline_parallel_summary.csv", pp_summary)
        pipeline_parallel.plot_measured(pp_plans, w.path("figures/pipeline_parallel_measured.png"))
    side_by_side = families.side_by_side(results)
    if run is not None and len(side_by_side):
        fam = run.get("families") or {}
        side_by_side = side_by_side[_only(side_by_side, model=fam.get("models") or [],
                                          cluster=fam.get("clusters") or [])]
    if len(side_by_side):
        w.csv("families.csv", side_by_side)
        w.csv("families_errors.csv", families.errors(side_by_side))
        families.plot_measured(side_by_side, w.path("figures/families_measured.png"))

    facts = summary.metrics(search, cases, best, checked)
    write_json(w.path("metrics.json"), facts)
    for stale in (out / "metrics").glob("*.json"):  # an earlier report's cases
        stale.unlink()
    for name, values in summary.dvc_metrics(facts).items():
        write_json(w.path(f"metrics/{name}"), values)
    figure_names = sorted(p.name for p in w.paths if p.parent.name == "figures")
    w.text("REPORT.md", summary.report_markdown(t3, t4, t5, facts, validation_ran, figure_names, ev, costs,
                                                dp_summary, dp_setup, pp_summary, side_by_side, tradeoff,
                                                preamble=preamble))
    return {"files": [str(p) for p in w.paths], "summary": facts}


def _cost_sources(graphs: dict[str, OpGraph], cases: pd.DataFrame) -> pd.DataFrame:
    """Which model made each case's op times (roofline, measured, scaled), per device kind."""
    from trinity.profile.speed_model import cost_source

    rows = []
    for model, cluster in dict.fromkeys(zip(cases["model"], cases["cluster"])):
        kinds = dict.fromkeys(d.kind for d in _case_cluster(cases, model, cluster).devices)
        rows += [{"model": model, "cluster": cluster, "device_kind": k, "op_times": cost_source(graphs[model], k)}
                 for k in kinds]
    return pd.DataFrame(rows)


def _case_cluster(cases: pd.DataFrame, model: str, cluster: str):
    folder = Path(cases[(cases["model"] == model) & (cases["cluster"] == cluster)]["best_folder"].iloc[0])
    config = read_json(folder / "metrics.json").get("cluster_config")
    return cluster_from_dict(config, str(folder / "metrics.json")) if config else load_cluster(cluster)


def _draw_best(graph: OpGraph, case: pd.Series, w: _Writer) -> None:
    """Placement (Fig. 4) and per-device Gantt chart of the best seed's strategy of a case's best method."""
    folder = Path(case["best_folder"])
    job = read_json(folder / "metrics.json")
    config = job.get("cluster_config")
    cluster = cluster_from_dict(config, str(folder / "metrics.json")) if config else load_cluster(case["cluster"])
    strategy_file = folder / "strategy.json"
    placement = Strategy.load(strategy_file).to_array(graph, cluster, source=str(strategy_file))
    res = Simulator(graph, cluster).simulate(placement, trace=True)
    model, name = case["model"], case["cluster"]
    title = f"{model} on {name}: {case['method']} (seed {case['best_seed']}), {res.step_time_us / 1e3:.2f} ms"
    figures.plot_placement(graph, placement, cluster.device_names, w.path(f"figures/placement_{model}_{name}.png"),
                           title)
    plot_gantt(res.gantt(graph, cluster.device_names), w.path(f"figures/gantt_{model}_{name}.png"), title=title,
               transfers=res.transfers_frame(cluster.device_names))
