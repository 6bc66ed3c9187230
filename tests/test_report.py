"""The report on a small hand-built results tree, with exact expected values."""

import json

import numpy as np
import pandas as pd
import pytest

from trinity.cluster import load_cluster
from trinity.errors import TrinityError
from trinity.fileio import write_json
from trinity.graph import save_graph
from trinity.graph.synthetic import layered_dag
from trinity.placement import Strategy
from trinity.report import build_report, tables


def write_job(results, graph, model, cluster, method, seed, step, comm, memory, fits=True, seconds_per_1000=None):
    c = load_cluster(cluster)
    folder = results / "search" / model / f"{cluster}-{method}-s{seed}"
    placement = np.arange(graph.n_ops) % c.n_devices if fits else np.zeros(graph.n_ops, np.int64)
    Strategy.from_array(graph, c, placement).save(folder / "strategy.json")
    write_json(folder / "metrics.json", {
        "model": model, "cluster": cluster, "method": method, "seed": seed, "devices": c.n_devices,
        "step_time_ms": step, "peak_comm_MB": comm, "peak_memory_GB": memory, "fits": fits, "search_seconds": 1.0,
        "iterations": 3 if seconds_per_1000 else 0, "seconds_per_1000_iterations": seconds_per_1000,
        "lower_bound_ms": 1.0, "best_iteration": 0, "cluster_config": c.to_dict()})
    if seconds_per_1000:
        pd.DataFrame({"iteration": [0, 1, 2], "charts/best_step_time_ms": [step + 2, step + 1, step],
                      "charts/step_time_ms_mean": [step + 5, step + 4, step + 3]}).to_csv(folder / "history.csv",
                                                                                        index=False)


@pytest.fixture
def tree(tmp_path):
    graph = layered_dag(60, 90, seed=0, colocated_fraction=0.0)
    save_graph(graph, tmp_path / "data" / "inception_v3" / "profile" / "graph.json.gz")
    results = tmp_path / "results"
    write_job(results, graph, "inception_v3", "p100x2", "single", 0, 20.0, 0.0, 1.0, fits=False)
    write_job(results, graph, "inception_v3", "p100x2", "m-etf", 0, 11.0, 5.0, 0.5)
    for seed, step in ((0, 10.0), (1, 12.0)):
        write_job(results, graph, "inception_v3", "p100x2", "hierarchical", seed, step, 4.0, 0.5, seconds_per_1000=100.0)
    for seed, step in ((0, 9.0), (1, 9.0)):
        write_job(results, graph, "inception_v3", "p100x2", "trinity", seed, step, 3.0, 0.5, seconds_per_1000=80.0)
    validate = results / "validate" / "inception_v3"
    validate.mkdir(parents=True)
    pd.DataFrame({"strategy": ["p100x2-trinity", "p100x2-m-etf"], "sim_step_ms": [11.0, 9.0],
                  "real_step_ms": [10.0, 10.0], "step_error": [0.1, -0.1]}).to_csv(validate / "results.csv",
                                                                                 index=False)
    return tmp_path


def test_tables_have_the_exact_values(tree):
    out = tree / "reports"
    written = build_report(tree / "results", tree / "data", out)
    t3 = pd.read_csv(out / "table3.csv")
    assert t3.to_dict("records") == [{"model": "inception_v3", "ops": 60, "edges": 90, "paper_ops": 12745,
                                      "paper_edges": 21928, "ops_vs_paper": round(60 / 12745, 3)}]
    t4 = pd.read_csv(out / "table4.csv").set_index("method")
    assert t4.loc["single", "runtime_ms"] == "OOM" and t4.loc["single", "peak_memory_GB"] == "OOM"
    assert float(t4.loc["hierarchical", "runtime_ms"]) == 11.0  # mean of 10 and 12
    assert t4.loc["hierarchical", "runtime_std_ms"] == round(np.sqrt(2), 3)  # sample std (ddof=1)
    assert t4.loc["hierarchical", "seeds"] == 2 and np.isnan(t4.loc["m-etf", "runtime_std_ms"])  # one seed: no std
    t5 = pd.read_csv(out / "table5.csv").iloc[0]
    assert t5["runtime_change_pct"] == pytest.approx(100 * (9 - 11) / 11, abs=0.01)  # -18.18
    assert t5["comm_change_pct"] == -25.0 and t5["memory_change_pct"] == 0.0
    assert t5["search_time_change_pct"] == -20.0
    assert written["summary"]["cases"] == {"inception_v3/p100x2": {"best_method": "trinity", "best_step_time_ms": 9.0}}
    assert written["summary"]["validation"] == {"inception_v3": {"strategies": 2, "step_error_median": 0.1}}
    assert json.loads((out / "metrics.json").read_text()) == written["summary"]


def test_every_figure_plot_and_markdown_is_written(tree):
    out = tree / "reports"
    build_report(tree / "results", tree / "data", out)
    assert {p.name for p in (out / "figures").glob("*.png")} == {
        "placement_inception_v3_p100x2.png", "gantt_inception_v3_p100x2.png", "convergence_inception_v3_p100x2.png",
        "bars_runtime.png", "bars_comm.png", "bars_memory.png", "sim_vs_real.png"}
    curve = pd.read_csv(out / "plots" / "convergence.csv")
    assert list(curve.columns) == ["iteration", "trinity", "hierarchical"]
    assert list(curve["trinity"]) == [11.0, 10.0, 9.0] and list(curve["hierarchical"]) == [12.0, 11.0, 10.0]
    methods = pd.read_csv(out / "plots" / "methods.csv")
    assert set(methods["method"]) == {"m-etf", "hierarchical", "trinity"}  # OOM has no bar
    assert len(pd.read_csv(out / "plots" / "sim_vs_real.csv")) == 2
    report = (out / "REPORT.md").read_text()
    assert "| inception_v3 | p100x2 | 2 | single | 1 | OOM |" in report
    assert "inception_v3: median |step time error| 10.0% over 2 strategies" in report
    assert "(figures/gantt_inception_v3_p100x2.png)" in report


def test_no_search_results_names_the_stage(tmp_path):
    with pytest.raises(TrinityError, match="run the search stage first"):
        build_report(tmp_path / "results", tmp_path / "data", tmp_path / "reports")


def test_markdown_formats_missing_values_and_thousands():
    table = pd.DataFrame({"a": [12745, None], "b": ["OOM", 1.5]})
    assert tables.markdown(table) == "| a | b |\n|---|---|\n| 12,745 | OOM |\n|  | 1.5 |\n"
