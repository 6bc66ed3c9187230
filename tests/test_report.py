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
from trinity.report.figures import layer_positions, topological_depth
from trinity.report.results import search_results

GRAPH = layered_dag(60, 90, seed=0, colocated_fraction=0.0)


def write_job(folder, model, cluster, method, seed, step, comm, memory, fits=True, seconds_per_1000=None):
    """One search job's folder as the search stage writes it (history.csv for the two searches)."""
    c = load_cluster(cluster)
    placement = np.arange(GRAPH.n_ops) % c.n_devices if fits else np.zeros(GRAPH.n_ops, np.int64)
    Strategy.from_array(GRAPH, c, placement).save(folder / "strategy.json")
    write_json(folder / "metrics.json", {
        "model": model, "cluster": cluster, "method": method, "seed": seed, "devices": c.n_devices,
        "step_time_ms": step, "peak_comm_MB": comm, "peak_memory_GB": memory, "fits": fits, "search_seconds": 1.0,
        "iterations": 3 if seconds_per_1000 else 0, "seconds_per_1000_iterations": seconds_per_1000,
        "lower_bound_ms": 1.0, "best_iteration": 0, "cluster_config": c.to_dict()})
    if seconds_per_1000:
        pd.DataFrame({"iteration": [0, 1, 2], "charts/best_step_time_ms": [step + 2, step + 1, step],
                      "charts/seconds": [0.5, 1.0, 1.5],
                      "charts/step_time_ms_mean": [step + 5, step + 4, step + 3]}).to_csv(folder / "history.csv",
                                                                                        index=False)


def nested(results, model, cluster, method, seed, *args, **kwargs):
    """dvc.yaml's layout: results/search/<model>/<cluster>-<method>-s<seed>/."""
    write_job(results / "search" / model / f"{cluster}-{method}-s{seed}", model, cluster, method, seed,
              *args, **kwargs)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report over: p100x2 with an OOM placer, a one-seed placer and two seeds of each search; p100x4 with
    one seed of each search; validation of three strategies, one not measured."""
    root = tmp_path_factory.mktemp("report")
    save_graph(GRAPH, root / "data" / "inception_v3" / "profile" / "graph.json.gz")
    results = root / "results"
    nested(results, "inception_v3", "p100x2", "single", 0, 20.0, 0.0, 1.0, fits=False)
    nested(results, "inception_v3", "p100x2", "m-etf", 0, 11.0, 5.0, 0.5)
    for seed, step in ((0, 10.0), (1, 12.0)):
        nested(results, "inception_v3", "p100x2", "hierarchical", seed, step, 4.0, 0.5, seconds_per_1000=100.0)
    for seed, step in ((0, 9.0), (1, 9.0)):
        nested(results, "inception_v3", "p100x2", "trinity", seed, step, 3.0, 0.5, seconds_per_1000=80.0)
    nested(results, "inception_v3", "p100x4", "hierarchical", 0, 10.0, 4.0, 0.4, seconds_per_1000=50.0)
    nested(results, "inception_v3", "p100x4", "trinity", 0, 9.0, 5.0, 0.3, seconds_per_1000=60.0)
    nested(results, "inception_v3", "p100x4", "optimum", 0, 8.0, 6.0, 0.3)
    validate = results / "validate" / "inception_v3"
    validate.mkdir(parents=True)
    # the model's own batch: one held-out split strategy ... one on one worker, one fitted, one not measured
    pd.DataFrame({"batch": 64, "strategy": ["p100x2-trinity-s0", "p100x2-m-etf", "p100x2-m-sct", "p100x2-single",
                                            "p100x2-expert"],
                  "source": ["trinity", "m-etf", "m-sct", "single", "expert"],
                  "calibration_set": [False, True, False, False, True],
                  "sim_step_ms": [11.0, 7.0, 9.0, 20.0, 5.0], "real_step_ms": [10.0, 10.0, 12.0, 16.0, None],
                  "sim_comm_MB": [5.0, 4.4, 3.0, 0.0, 0.5],
                  "real_crossed_MB": [5.0, 4.0, 3.0, 0.0, None], "comm_error": [0.0, 0.1, 0.0, 0.0, None],
                  "overridden": [0, 0, 0, 0, None],
                  "step_error": [0.1, -0.3, -0.25, 0.25, None]}).to_csv(validate / "results.csv", index=False)
    (validate / "batch16").mkdir()  # the same strategies at a smaller batch: all three held out and split
    pd.DataFrame({"batch": 16, "strategy": ["p100x2-trinity-s0", "p100x2-m-sct", "p100x2-hierarchical-s1"],
                  "source": ["trinity", "m-sct", "hierarchical"], "calibration_set": False,
                  "sim_step_ms": [2.0, 3.0, 4.0], "real_step_ms": [2.5, 3.0, 5.0], "sim_comm_MB": 1.0,
                  "real_crossed_MB": 1.0,
                  "comm_error": 0.0, "overridden": 0,
                  "step_error": [-0.2, 0.0, -0.2]}).to_csv(validate / "batch16" / "results.csv", index=False)
    for method, seed, target, acc, sent in (("ddp", 0, 2.0, 0.97, 100e6), ("ddp", 1, 4.0, 0.95, 100e6),
                                            ("daso", 0, 1.0, 0.96, 90e6), ("daso", 1, None, 0.90, 80e6)):
        curve = [{"epoch": e, "time_s": 1.0 + e, "train_loss": 1.0 / (e + 1), "val_loss": 1.0 / (e + 1),
                  "val_acc": acc} for e in range(3)]
        write_json(results / "train" / f"{method}-s{seed}" / "result.json", {
            "method": method, "seed": seed, "data": "digits", "time_to_target_s": target, "train_time_s": 3.0,
            "final_val_loss": 1 / 3, "final_val_acc": acc, "sent_bytes": sent, "curve": curve,
            "target_val_loss": 0.5, "config": {"nproc": 4, "procs_per_node": 2, "slow_ranks": [3], "slowdown": 3.0,
                                               "link": {"latency_ms": 1.0, "bandwidth_MBps": 100.0}}})
    out = root / "reports"
    return out, build_report(results, root / "data", out)


def test_table3_sets_ours_beside_the_papers(report):
    out, _ = report
    assert pd.read_csv(out / "table3.csv").to_dict("records") == [{
        "model": "inception_v3", "ops": 60, "edges": 90, "paper_ops": 12745, "paper_edges": 21928,
        "ops_vs_paper": round(60 / 12745, 3)}]


def test_table4_means_sample_stds_and_oom(report):
    out, _ = report
    t4 = pd.read_csv(out / "table4.csv")
    two = t4[t4["cluster"] == "p100x2"].set_index("method")
    assert list(two.index) == ["single", "m-etf", "hierarchical", "trinity"]  # the paper's order
    assert (two.loc["single", ["runtime_ms", "peak_comm_MB", "peak_memory_GB"]] == "OOM").all()
    assert np.isnan(two.loc["single", "runtime_std_ms"])
    assert float(two.loc["hierarchical", "runtime_ms"]) == 11.0  # mean of 10 and 12
    assert two.loc["hierarchical", "runtime_std_ms"] == round(np.sqrt(2), 3)  # sample std (ddof=1) of 10, 12
    assert two.loc["trinity", "runtime_std_ms"] == 0.0 and two.loc["hierarchical", "seeds"] == 2
    assert np.isnan(two.loc["m-etf", "runtime_std_ms"])  # one seed: no std
    assert float(two.loc["m-etf", "peak_comm_MB"]) == 5.0 and float(two.loc["m-etf", "peak_memory_GB"]) == 0.5
    # the paper's Table 4 beside ours (shared/reference/trinity-paper/table4.csv): one GPU OOM, Trinity 0.73 s
    assert two.loc["single", "paper_runtime_s"] == "OOM" and float(two.loc["trinity", "paper_runtime_s"]) == 0.73
    assert float(two.loc["trinity", "paper_peak_comm_MB"]) == 5600.0 and pd.isna(two.loc["m-etf", "paper_runtime_s"])
    assert list(t4["devices"]) == [2, 2, 2, 2, 4, 4, 4]


def test_table5_is_trinitys_change_against_hierarchical(report):
    out, _ = report
    t5 = pd.read_csv(out / "table5.csv").set_index("cluster")
    four = t5.loc["p100x4"]  # one seed each: Trinity 9 ms against Hierarchical 10 ms
    assert four["runtime_change_pct"] == -10.0 and four["comm_change_pct"] == 25.0
    assert four["memory_change_pct"] == -25.0 and four["search_time_change_pct"] == 20.0
    two = t5.loc["p100x2"]  # means over two seeds: 9 against 11
    assert two["runtime_change_pct"] == round(100 * (9 - 11) / 11, 2) == -18.18
    assert two["comm_change_pct"] == -25.0 and two["memory_change_pct"] == 0.0
    assert two["trinity_s_per_1000_it"] == 80.0 and two["search_time_change_pct"] == -20.0
    # the paper's Table 5 as the same change (its "% decrease" negated): InceptionV3 on 2 GPUs
    assert two["paper_runtime_change_pct"] == 0.0 and two["paper_comm_change_pct"] == -6.8
    assert two["paper_search_time_change_pct"] == -41.7


#: results.csv files without the measurement's quartiles and the machine's load (older runs), one run each
NO_NOISE = {"held_out_split_spread_median": None, "held_out_split_resolved_pairs": None,
            "held_out_split_resolved_concordance": None, "load_max": None, "other_cpu_max": None, "steal_max": None,
            "retimed_runs": None, "step_sync_drift_ms": None, "held_out_split_unsynced_step_error_median": None,
            "held_out_split_run_to_run_rank": None,
            "held_out_split_run_to_run_error_rank": None, "held_out_split_rank_for_reliability": None,
            "held_out_split_rounds_for_retest": None}


def test_summary_and_metrics_json(report):
    out, written = report
    summary = written["summary"]
    assert summary["cases"] == {"inception_v3/p100x2": {"best_method": "trinity", "best_step_time_ms": 9.0},
                                "inception_v3/p100x4": {"best_method": "optimum", "best_step_time_ms": 8.0}}
    # |errors| 0.1, 0.3, 0.25, 0.25; held out and split: 0.1 and 0.25; Spearman of ranks (3,1,2,4) and
    # (1.5,1.5,3,4): 3 / sqrt(5 x 4.5)
    assert summary["validation"] == {
        "inception_v3 b64": {"strategies": 4, "step_error_median": 0.25, "held_out_split_strategies": 2,
                             "held_out_split_step_error_median": 0.175, "held_out_split_step_error_p90": 0.235,
                             "rank_correlation": round(3 / np.sqrt(22.5), 4),
                             "held_out_split_rank_correlation": None, "held_out_split_comm_error_max": 0.0,
                             "held_out_split_comm_error_floor_max": 0.0, "held_out_split_comm_unrecorded": 0,
                             **NO_NOISE},
        "inception_v3 b16": {"strategies": 3, "step_error_median": 0.2, "held_out_split_strategies": 3,
                             "held_out_split_step_error_median": 0.2, "held_out_split_step_error_p90": 0.2,
                             "rank_correlation": 1.0, "held_out_split_rank_correlation": 1.0,
                             "held_out_split_comm_error_max": 0.0, "held_out_split_comm_error_floor_max": 0.0,
                             "held_out_split_comm_unrecorded": 0, **NO_NOISE}}
    assert summary["counts"] == {"models": 1, "cases": 2, "search_jobs": 9, "validated_strategies": 7}
    assert json.loads((out / "metrics.json").read_text()) == summary
    # what `dvc metrics show` reads: a file per row, a few well-named numbers each
    assert {p.name: json.loads(p.read_text()) for p in (out / "metrics").glob("*.json")} == {
        "inception_v3-p100x2.json": {"best_ms": 9.0, "best_method": "trinity"},
        "inception_v3-p100x4.json": {"best_ms": 8.0, "best_method": "optimum"},
        "sim_vs_real-inception_v3-b64.json": {"median_err": 0.175, "rank": None},
        "sim_vs_real-inception_v3-b16.json": {"median_err": 0.2, "rank": 1.0}}


def test_every_file_is_written(report):
    out, written = report
    figures = {f"{kind}_inception_v3_{c}.png" for kind in ("placement", "gantt", "convergence", "time_to_quality")
               for c in ("p100x2", "p100x4")}
    figures |= {"bars_runtime.png", "bars_comm.png", "bars_memory.png", "sim_vs_real.png",
                "data_parallel_loss_vs_time.png"}
    assert {p.name for p in (out / "figures").iterdir()} == figures
    names = [f"{n}.{ext}" for n in ("table3", "table4", "table5", "evaluation", "costs", "reward_tradeoff")
             for ext in ("csv", "md")]
    names += ["REPORT.md", "metrics.json", "data_parallel.csv", "data_parallel_summary.csv", "validation.csv"]
    names += [f"plots/{n}.csv" for n in ("methods", "convergence", "sim_vs_real")]
    names += [f"metrics/{n}.json" for n in ("inception_v3-p100x2", "inception_v3-p100x4",
                                             "sim_vs_real-inception_v3-b64", "sim_vs_real-inception_v3-b16")]
    names += [f"figures/{n}" for n in figures]
    assert sorted(written["files"]) == sorted(str(out / n) for n in names)
    assert all((out / n).stat().st_size > 0 for n in names)


def test_plot_data(report):
    out, _ = report
    curve = pd.read_csv(out / "plots" / "convergence.csv")  # first model, largest cluster (p100x4), seed 0
    assert list(curve.columns) == ["iteration", "trinity", "hierarchical"]
    assert list(curve["trinity"]) == [11.0, 10.0, 9.0] and list(curve["hierarchical"]) == [12.0, 11.0, 10.0]
    methods = pd.read_csv(out / "plots" / "methods.csv")
    assert list(methods.columns) == ["case", "method", "step_time_ms"]
    assert "single" not in set(methods["method"])  # OOM has no bar
    assert methods.set_index(["case", "method"]).loc[("inception_v3/p100x2", "hierarchical"), "step_time_ms"] == 11.0
    scatter = pd.read_csv(out / "plots" / "sim_vs_real.csv")
    assert list(scatter.columns) == ["model", "batch", "strategy", "sim_step_ms", "real_step_ms", "held_out_split"]
    assert len(scatter) == 7 and scatter["held_out_split"].sum() == 5
    table = pd.read_csv(out / "validation.csv").set_index("case")
    assert table.loc["inception_v3 b16", "held_out_split_strategies"] == 3


def test_report_markdown(report):
    out, _ = report
    text = (out / "REPORT.md").read_text()
    assert "| inception_v3 | p100x2 | 2 | single | 1 | 1 | OOM |  | OOM |  | OOM |  | OOM |  |  |\n" in text
    assert "| inception_v3 b16 | 3 | 20.0% | 3 | 20.0% | 20.0% | 1.00 | 1.00 |" in text
    assert "- inception_v3/p100x4: optimum (8.0 ms)" in text and "## Every method against the best placer" in text
    assert "paper columns: Zeng et al., Algorithms 2022, 15(4), 108, Tables 4 and 5" in text
    assert "(figures/gantt_inception_v3_p100x2.png)" in text and "make repro" in text
    assert (out / "table4.md").read_text() in text


def test_one_seed_no_search_method_and_no_validation(tmp_path):
    """One case with no search method: no convergence figure, empty convergence columns, and no validation."""
    save_graph(GRAPH, tmp_path / "data" / "nmt_2layer" / "profile" / "graph.json.gz")
    search = tmp_path / "results" / "search"
    write_job(search / "nmt_2layer" / "p100x2-m-topo-s0", "nmt_2layer", "p100x2", "m-topo", 0, 7.0, 1.0, 0.2)
    out = tmp_path / "reports"
    written = build_report(tmp_path / "results", tmp_path / "data", out)
    assert len(search_results(tmp_path / "results")) == 1
    assert written["summary"]["cases"] == {"nmt_2layer/p100x2": {"best_method": "m-topo", "best_step_time_ms": 7.0}}
    assert not (out / "figures" / "sim_vs_real.png").exists()
    assert not list((out / "figures").glob("convergence_*"))
    curve = pd.read_csv(out / "plots" / "convergence.csv")
    assert list(curve.columns) == ["iteration", "trinity", "hierarchical"] and len(curve) == 0
    assert pd.read_csv(out / "table5.csv").empty
    assert "Validation was not run" in (out / "REPORT.md").read_text()
    assert pd.read_csv(out / "table3.csv").iloc[0][["paper_ops", "paper_edges"]].tolist() == [16432, 24235]


def test_regime_tradeoff_table_and_pareto_front(tmp_path):
    """The paper's regime (results/regime/): the MDPE reward against the runtime-only one, two seeds each."""
    save_graph(GRAPH, tmp_path / "data" / "tiny" / "profile" / "graph.json.gz")
    save_graph(GRAPH, tmp_path / "data" / "big" / "profile" / "graph.json.gz")
    write_job(tmp_path / "results" / "search" / "tiny" / "p100x2-m-etf-s0", "tiny", "p100x2", "m-etf", 0,
              5.0, 1.0, 0.1)
    regime = tmp_path / "results" / "regime" / "search" / "big"
    for method, seed, step, comm, memory in (("m-etf", 0, 100.0, 900.0, 3.0), ("metis", 0, 120.0, 300.0, 2.5),
                                             ("trinity-warm", 0, 105.0, 400.0, 1.8),
                                             ("trinity-warm", 1, 107.0, 450.0, 1.9),
                                             ("trinity-runtime", 0, 90.0, 1200.0, 3.5),
                                             ("trinity-runtime", 1, 94.0, 1000.0, 2.9)):
        folder = regime / f"p100x4-{method}-s{seed}"
        write_job(folder, "big", "p100x4", method, seed, step, comm, memory)
        metrics = json.loads((folder / "metrics.json").read_text())
        write_json(folder / "metrics.json", {**metrics, "comm_tolerance_GB": 0.5, "memory_tolerance_GB": 2.0})
    out = tmp_path / "reports"
    build_report(tmp_path / "results", tmp_path / "data", out)
    t = pd.read_csv(out / "reward_tradeoff.csv").set_index("entry")
    assert list(t.index) == ["best placer (m-etf)", "Trinity (MDPE reward)", "Trinity (runtime-only reward)"]
    assert t.loc["Trinity (MDPE reward)", "step_time_ms"] == 106.0 and t.loc["Trinity (MDPE reward)", "seeds"] == 2
    assert t.loc["Trinity (runtime-only reward)", "peak_memory_GB"] == 3.2
    assert t.loc["Trinity (runtime-only reward)", "peak_comm_MB_std"] == round(np.sqrt(2e4), 1)
    # within 0.5 GB of communication and 2 GB of memory: both MDPE seeds, no runtime-only seed, not m-etf
    assert list(t["seeds_within_tolerances"]) == [0, 2, 0] and set(t["memory_tolerance_GB"]) == {2.0}
    assert (out / "figures" / "pareto_big_p100x4.png").stat().st_size > 0
    assert "what the multi-objective reward buys" in (out / "REPORT.md").read_text()
    ev = pd.read_csv(out / "evaluation.csv")
    assert set(zip(ev["model"], ev["cluster"])) == {("tiny", "p100x2"), ("big", "p100x4")}  # both trees read


def test_pareto_front_by_hand():
    from trinity.report.evaluation import pareto_front

    points = pd.DataFrame({"t": [1.0, 2.0, 2.0, 3.0, 1.0], "m": [3.0, 1.0, 2.0, 3.0, 3.0]})
    # (2, 2) is dominated by (2, 1), (3, 3) by everything; the two equal (1, 3) do not dominate each other
    assert list(pareto_front(points, ["t", "m"]).index) == [0, 1, 4]


def test_no_search_results_names_the_stage(tmp_path):
    with pytest.raises(TrinityError, match=r"no search results in .*run the search stage first \(dvc repro search\)"):
        build_report(tmp_path / "results", tmp_path / "data", tmp_path / "reports")


def test_missing_graph_names_the_profile_stage(tmp_path):
    write_job(tmp_path / "results" / "search" / "gnmt" / "p100x2-single-s0", "gnmt", "p100x2", "single", 0,
              5.0, 0.0, 0.1)
    with pytest.raises(TrinityError, match=r"gnmt/profile/graph.json.gz: missing; run the profile stage first "
                                           r"\(dvc repro profile@gnmt\)"):
        build_report(tmp_path / "results", tmp_path / "data", tmp_path / "reports")


def test_depth_layers_are_exact():
    chain = layered_dag(6, 5, width=1, seed=0, colocated_fraction=0.0, control_fraction=0.0)
    assert list(topological_depth(chain)) == list(range(6))
    assert list(layer_positions(np.array([0, 1, 0, 1, 1]))) == [0.25, 1 / 6, 0.75, 0.5, 5 / 6]
    big = layered_dag(15000, 24000, seed=1)
    depth = topological_depth(big)
    src, dst = big.arrays.src, big.arrays.dst
    assert (depth[dst] >= depth[src] + 1).all()  # every edge goes at least one layer down


def test_markdown_formats_missing_values_and_thousands():
    table = pd.DataFrame({"a": [12745, None], "b": ["OOM", 1.5]})
    assert tables.markdown(table) == "| a | b |\n|---|---|\n| 12,745 | OOM |\n|  | 1.5 |\n"


def test_evaluation_table_by_hand(report):
    out, _ = report
    ev = pd.read_csv(out / "evaluation.csv")
    two = ev[ev["cluster"] == "p100x2"].set_index("entry")
    assert list(two.index) == ["best placer", "hierarchical", "trinity", "lower bound (compute only)"]
    assert two.loc["best placer", "method"] == "m-etf" and two.loc["best placer", "step_time_ms"] == 11.0
    # hierarchical: seeds at 10 and 12 around m-etf's 11: not a win; trinity: both seeds at 9
    assert two.loc["hierarchical", "step_time_ms"] == 11.0 and two.loc["hierarchical", "verdict"] == "within spread"
    assert two.loc["hierarchical", "step_time_std_ms"] == 1.414  # sample std of 10 and 12, 3 decimals
    assert two.loc["trinity", "verdict"] == "win (every seed below)"
    assert two.loc["trinity", "vs_best_placer_pct"] == pytest.approx(-18.18)
    assert two.loc["trinity", "vs_m_etf_pct"] == pytest.approx(-18.18)  # m-ETF is the best placer here
    assert two.loc["trinity", "vs_lower_bound_pct"] == 800.0  # 9 ms against a 1 ms bound
    assert two.loc["lower bound (compute only)", "step_time_ms"] == 1.0
    four = ev[ev["cluster"] == "p100x4"].set_index("entry")
    assert four.loc["exact optimum", "step_time_ms"] == 8.0
    assert four.loc["trinity", "vs_optimum_pct"] == 12.5 and four.loc["hierarchical", "vs_optimum_pct"] == 25.0
    assert "best placer" not in four.index  # no placer ran there
    costs = pd.read_csv(out / "costs.csv")
    assert set(costs["op_times"]) == {"as imported, scaled by device speed"}  # a synthetic graph, no speed model


def test_annealing_at_the_searchs_own_wall_time_and_the_collapse_label(tmp_path):
    from trinity.report.evaluation import annealing_at, collapse_label

    for seed, curve in ((0, [(0.5, 10.0), (2.0, 8.0), (9.0, 6.0)]), (1, [(1.0, 12.0), (4.0, 7.0)])):
        folder = tmp_path / f"a{seed}"
        folder.mkdir()
        pd.DataFrame(curve, columns=["charts/seconds", "charts/best_step_time_ms"]).to_csv(folder / "history.csv")
    search = pd.DataFrame({"model": "m", "cluster": "c", "method": ["annealing-scratch"] * 2 + ["trinity"] * 2,
                           "seed": [0, 1, 0, 1], "folder": [str(tmp_path / "a0"), str(tmp_path / "a1"), "", ""],
                           "search_seconds": [9.0, 4.0, 3.0, 1.5]})
    # trinity's seed 0 ran 3 s: annealing had reached 8 ms by then; seed 1 ran 1.5 s: 12 ms
    assert annealing_at(search, "m", "c", "trinity") == 10.0
    assert annealing_at(search, "m", "c", "hierarchical-warm") is None  # no annealing-long ran
    assert collapse_label(0.95) and collapse_label(1.0) and not collapse_label(0.949) and not collapse_label(None)


def test_data_parallel_runs_and_their_summary_against_ddp(report):
    out, _ = report
    runs = pd.read_csv(out / "data_parallel.csv")
    assert list(zip(runs["method"], runs["seed"])) == [("ddp", 0), ("ddp", 1), ("daso", 0), ("daso", 1)]
    assert list(runs["reached_target"]) == [True, True, True, False]
    s = pd.read_csv(out / "data_parallel_summary.csv").set_index("method")
    assert s.loc["ddp", "time_to_target_s"] == 3.0 and s.loc["daso", "time_to_target_s"] == 1.0  # reached only
    assert s.loc["daso", "reached"] == 1 and s.loc["daso", "runs"] == 2
    assert s.loc["daso", "time_to_target_s_vs_ddp"] == round(1 / 3, 4) and s.loc["daso", "sent_MB_vs_ddp"] == 0.85
    assert s.loc["ddp", "final_val_acc"] == 0.96 and s.loc["ddp", "train_time_s_vs_ddp"] == 1.0
    text = (out / "REPORT.md").read_text()
    assert "worker(s) 3 slowed 3.0x" in text and "## Data parallelism, trained for real" in text


def test_per_method_summarises_the_committed_partition_metrics(tmp_path):
    from trinity.fileio import write_json
    from trinity.report.pipeline_parallel import per_method
    folder = tmp_path / "partition" / "m"
    for method, seed, ms in (("tapp", 0, 10.0), ("tapp", 1, 12.0), ("even", 0, 20.0)):
        write_json(folder / f"c-{method}-s{seed}.metrics.json",
                   {"method": method, "seed": seed, "step_time_ms": ms, "search_seconds": 1.0})
    t = per_method(tmp_path, "m", "c").set_index("method")
    assert t.loc["tapp", "seeds"] == 2 and t.loc["tapp", "step_ms"] == 11.0
    assert t.loc["tapp", "step_std_ms"] == 1.414 and list(t.index) == ["tapp", "even"]  # rounded to 3 places


def test_validation_runs_and_measurement_noise(tmp_path):
    """Two calibration runs of one model: each its own row; the noise figures of the held-out split
    strategies from their quartiles; the scatter draws a panel per run with the quartiles as error bars."""
    from trinity.report.figures import plot_sim_vs_real_all
    from trinity.report.results import measured, validation_results
    from trinity.report.summary import validation_errors

    folder = tmp_path / "results" / "validate" / "m"

    def write(path, batch, run, real, q1, q3, sim, load, retimed=None, synced=None):
        path.mkdir(parents=True, exist_ok=True)
        real = np.array(real)
        pd.DataFrame({**({} if retimed is None else {"retimed": retimed}),
                      **({} if synced is None else {"step_sync_drift_ms": synced, "sync_added_ms": synced}),
                      "batch": batch, "run": run, "strategy": ["a", "b", "c"], "source": "search",
                      "calibration_set": False, "sim_step_ms": sim, "real_step_ms": real, "real_q1_ms": q1,
                      "real_q3_ms": q3, "real_spread": (np.array(q3) - np.array(q1)) / real,
                      "sim_comm_MB": [1.0, 1.01, 0.97], "real_crossed_MB": 1.0, "comm_error": [0.0, 0.01, -0.03],
                      "overridden": 0,
                      "step_error": (np.array(sim) - real) / real, "load_max": load}).to_csv(path / "results.csv",
                                                                                           index=False)

    # run 1: every pair's IQRs apart, all ordered alike; run 2: a and b overlap, a and c ordered apart
    write(folder, 64, 1, [10.0, 12.0, 20.0], [9.5, 11.0, 19.0], [10.5, 13.0, 21.0], [11.0, 11.5, 19.0], [1.5, 2.0, 0.5])
    write(folder / "run2", 64, 2, [10.0, 10.4, 20.0], [9.0, 10.0, 19.0], [11.0, 11.0, 21.0], [12.0, 11.0, 11.5],
          [0.5, 0.5, 3.0])
    write(folder / "run2" / "batch8", 8, 2, [1.0, 2.0, 4.0], [0.9, 1.9, 3.9], [1.1, 2.1, 4.1], [1.0, 2.0, 4.0],
          [0.1, 0.1, 0.1], retimed=[0, 2, 1], synced=0.5)
    table = validation_results(tmp_path / "results")
    assert sorted(zip(table["model"], table["batch"], table["run"]))[::3] == [("m", 8, 2), ("m", 64, 1), ("m", 64, 2)]
    errors = validation_errors(measured(table))
    assert list(errors) == ["m b64 run1", "m b64 run2", "m b8 run2"]
    one, two = errors["m b64 run1"], errors["m b64 run2"]
    assert (one["held_out_split_resolved_pairs"], one["held_out_split_resolved_concordance"]) == (1.0, 1.0)
    assert one["held_out_split_spread_median"] == 0.1 and one["load_max"] == 2.0
    assert two["held_out_split_resolved_pairs"] == round(2 / 3, 4) and two["held_out_split_resolved_concordance"] == 0.5
    assert two["held_out_split_comm_error_max"] == 0.03 and two["load_max"] == 3.0
    assert two["held_out_split_comm_error_floor_max"] == 0.03  # 1 MB crossed: the floor changes nothing
    assert errors["m b8 run2"]["held_out_split_rank_correlation"] == 1.0
    # runs timed again: counted where the part recorded them, blank where it predates retiming
    assert errors["m b8 run2"]["retimed_runs"] == 3 and one["retimed_runs"] is None
    # the step over both workers anchored to its rounds (0.5 ms added to each): simulated 0.5, 1.5 and 3.5 ms
    # before, against 1, 2 and 4 ms measured; blank where not anchored
    assert errors["m b8 run2"]["step_sync_drift_ms"] == 0.5
    assert errors["m b8 run2"]["held_out_split_unsynced_step_error_median"] == 0.25
    assert one["step_sync_drift_ms"] is None and one["held_out_split_unsynced_step_error_median"] is None
    # both runs order a < b < c by their measurements; batch 8 ran once
    assert one["held_out_split_run_to_run_rank"] == two["held_out_split_run_to_run_rank"] == 1.0
    assert errors["m b8 run2"]["held_out_split_run_to_run_rank"] is None
    # and the simulator misses them in the same order: errors 0.1, -0.04, -0.05 then 0.2, 0.06, -0.43
    assert one["held_out_split_run_to_run_error_rank"] == two["held_out_split_run_to_run_error_rank"] == 1.0
    assert errors["m b8 run2"]["held_out_split_run_to_run_error_rank"] is None
    # against measurements that repeat exactly, the rank stands as it is: 1 in run 1, -0.5 in run 2 (a, b, c
    # simulated 3rd, 1st, 2nd); batch 8 has one run to read a reliability from
    assert (one["held_out_split_rank_for_reliability"], two["held_out_split_rank_for_reliability"]) == (1.0, -0.5)
    assert errors["m b8 run2"]["held_out_split_rank_for_reliability"] is None
    assert one["held_out_split_rounds_for_retest"] == 1.0  # the runs agree already
    assert errors["m b8 run2"]["held_out_split_rounds_for_retest"] is None
    plot_sim_vs_real_all(measured(table), tmp_path / "scatter.png")
    assert (tmp_path / "scatter.png").stat().st_size > 0


def test_rank_for_reliability_is_the_rank_over_the_square_root_of_the_measurements_own():
    from trinity.report.summary import rank_for_reliability

    assert rank_for_reliability(0.5, 0.25) == 1.0
    assert rank_for_reliability(0.68, 0.7) == round(0.68 / 0.7 ** 0.5, 4) == 0.8128
    assert rank_for_reliability(-0.3, 0.36) == -0.5
    for rank, retest in ((0.5, None), (None, 0.8), (0.5, 0.0), (0.5, -0.2)):  # no second run, or runs that disagree
        assert rank_for_reliability(rank, retest) is None


def test_rounds_for_retest_is_the_spearman_brown_prophecy():
    from trinity.report.summary import rounds_for_retest

    assert rounds_for_retest(0.5) == 9.0  # 0.9 * 0.5 / (0.5 * 0.1)
    assert rounds_for_retest(0.75, target=0.8) == round(0.8 * 0.25 / (0.75 * 0.2), 2) == 1.33
    assert rounds_for_retest(0.7) == round(0.9 * 0.3 / 0.07, 2) == 3.86
    assert rounds_for_retest(0.95) == rounds_for_retest(0.9) == 1.0
    for retest in (None, 0.0, -0.3):
        assert rounds_for_retest(retest) is None


def test_a_missed_bar_says_by_how_much_and_what_the_measurement_shows():
    import os

    from trinity.report.summary import target_misses

    cores = len(os.sched_getaffinity(0))
    v = {"held_out_split_step_error_median": 0.125, "held_out_split_rank_correlation": 0.75,
         "held_out_split_comm_error_max": 0.03, "held_out_split_resolved_pairs": 0.4,
         "held_out_split_resolved_concordance": 0.5, "load_max": 100.0}
    why = (f" (40% of strategy pairs lie further apart than their measured IQRs (the simulator orders 50.0% of "
           f"those alike); the machine's load reached 100.0 on {cores} cores)")
    assert target_misses("m b8 run2", v) == [
        f"- m b8 run2: median error 12.5%, 2.5 points over the 10% bar{why}",
        f"- m b8 run2: rank correlation 0.75, 0.05 under the 0.8 bar{why}",
        "- m b8 run2: communication off by up to 3.0% (of the bytes, or of 1 MB where fewer cross), over the 2% bar"]
    # the floored error, where a row has it, is the one held to the bar; a rank that rounds to the bar is exact
    floored = {**v, "held_out_split_comm_error_floor_max": 0.004, "held_out_split_rank_correlation": 0.7998}
    assert target_misses("m", floored)[1:] == [f"- m: rank correlation 0.7998, 0.0002 under the 0.8 bar{why}"]
    just_over = {**floored, "held_out_split_step_error_median": 0.1003}  # a median that rounds to the bar: exact
    assert target_misses("m", just_over)[0] == f"- m: median error 10.03%, 0.03 points over the 10% bar{why}"
    retested = {**floored, "held_out_split_rank_correlation": 0.68, "held_out_split_run_to_run_rank": 0.7,
                "held_out_split_rank_for_reliability": 0.8128, "held_out_split_rounds_for_retest": 3.86}
    assert target_misses("m", retested)[1] == (
        "- m: rank correlation 0.68, 0.12 under the 0.8 bar (40% of strategy pairs lie further apart than their "
        "measured IQRs (the simulator orders 50.0% of those alike); two runs' measurements rank them 0.70 alike, so "
        "against an exact measurement the rank would be about 0.81, and 3.9x the rounds would make them 0.9 alike; "
        f"the machine's load reached 100.0 on {cores} cores)")
    good = {**v, "held_out_split_step_error_median": 0.05, "held_out_split_rank_correlation": 0.9,
            "held_out_split_comm_error_max": 0.001}
    assert target_misses("m b64", good) == []
    # a run that others disturbed past 2% of the cores' time is named among the reasons (1.5% is not)
    disturbed = {"held_out_split_step_error_median": 0.178, "other_cpu_max": 0.125, "steal_max": 0.015}
    assert target_misses("m b8", disturbed) == [
        "- m b8: median error 17.8%, 7.8 points over the 10% bar (other processes took up to 12.5% of the cores' "
        "time in one run)"]


def test_evaluation_table_with_the_communication_bound(report):
    """A bound counting communication (results/bounds.csv): each row's % above it, and whether the best placer
    (m-ETF, 11 ms) is 5% or more above it: 10 ms leaves 10%, 10.6 ms leaves under 5%."""
    from trinity.report.evaluation import comm_bounds, evaluation_table
    from trinity.report.results import per_case, search_results

    out, _ = report
    results = out.parent / "results"
    assert comm_bounds(results).empty  # no `make bounds` run: no column filled, nothing refused
    cases = per_case(search_results(results))
    row = {"model": "inception_v3", "cluster": "p100x2", "time_limit_s": 60, "segments": 3,
           "segments_optimal": 2, "worst_milp_gap_pct": 1.5}
    for bound, room in ((10.0, True), (10.6, False)):
        ev = evaluation_table(cases, None, pd.DataFrame([{**row, "bound_ms": bound}]))
        two = ev[ev["cluster"] == "p100x2"].set_index("entry")
        assert two.loc["lower bound (counts communication)", "step_time_ms"] == bound
        assert "2/3 segments optimal, worst gap 1.5%" in two.loc["lower bound (counts communication)", "method"]
        assert two.loc["trinity", "vs_tightest_bound_pct"] == pytest.approx(100 * (9 / bound - 1), abs=0.01)
        assert two.loc["best placer", "room_5pct"] == room
    ev = evaluation_table(cases, None, pd.DataFrame([{**row, "bound_ms": 0.5}]))  # looser than compute-only: 1 ms
    assert ev[ev["entry"] == "trinity"]["vs_tightest_bound_pct"].iloc[0] == 800.0


def test_communication_error_below_a_megabyte_is_read_against_one():
    """Bytes that cross: 4 MB (simulated 4.1: 2.5%), 0.5 MB (0.4: 0.1 MB of the 1 MB floor, 10%) and
    4 bytes simulated as none (4e-6 of 1 MB, not 100%)."""
    from trinity.runtime.validate import comm_error_floor

    rows = pd.DataFrame({"sim_comm_MB": [4.1, 0.4, 0.0], "real_crossed_MB": [4.0, 0.5, 4e-6]})
    assert np.allclose(comm_error_floor(rows), [0.025, 0.1, 4e-6])
    assert comm_error_floor(rows.iloc[:0]).empty


def test_bytes_are_compared_only_where_the_traced_steps_recorded_every_crossing():
    """Four held-out splits: a and c recorded every tensor that crossed (1% and 2% off), b's traced steps
    missed 12 tensors (read 55 of 100 MB: 45% off by the measurement, not the simulator) and d's every one of
    its 5: b and d are counted apart, and d still counts as a split."""
    from trinity.report.summary import target_misses
    from trinity.runtime.validate import error_summary

    rows = pd.DataFrame({"strategy": ["a", "b", "c", "d"], "calibration_set": False,
                         "sim_step_ms": [10.0, 20.0, 30.0, 40.0], "real_step_ms": [10.0, 20.0, 30.0, 40.0],
                         "step_error": 0.0, "sim_comm_MB": [10.1, 100.0, 5.1, 2.0],
                         "real_crossed_MB": [10.0, 55.0, 5.0, 0.0], "real_transfers_missing": [0, 12, 0, 5],
                         "overridden": 0})
    rows["comm_error"] = (rows["sim_comm_MB"] - rows["real_crossed_MB"]) / rows["real_crossed_MB"]
    s = error_summary(rows)
    assert s["held_out_split_strategies"] == 4 and s["held_out_split_comm_unrecorded"] == 2
    assert s["held_out_split_comm_error_max"] == pytest.approx(0.02)
    assert s["held_out_split_comm_error_floor_max"] == pytest.approx(0.02)
    assert s["held_out_split_comm_error_median"] == pytest.approx(0.015)
    before = error_summary(rows.drop(columns="real_transfers_missing"))  # a table from before the count: all compared
    assert before["held_out_split_strategies"] == 3 and before["held_out_split_comm_unrecorded"] == 0
    assert before["held_out_split_comm_error_max"] == pytest.approx(45 / 55)
    v = {"held_out_split_step_error_median": 0.05, "held_out_split_rank_correlation": 0.9,
         "held_out_split_comm_error_floor_max": 0.02, "held_out_split_comm_unrecorded": 1}
    assert target_misses("m", v) == ["- m: 1 held-out split(s) not compared on bytes: no traced step recorded every "
                                     "tensor its partition graphs send between the workers"]


def test_run_to_run_rank_compares_two_runs_measurements_of_the_same_held_out_splits():
    from trinity.report.summary import run_to_run_rank

    def rows(run, real, fitted=(), alone=()):
        names = [f"s{i}" for i in range(len(real))]
        return pd.DataFrame({"model": "m", "batch": 8, "run": run, "strategy": names, "real_step_ms": real,
                             "step_error": [0.1 * i * (1 if run == 1 else -1) for i in range(len(real))],
                             "calibration_set": [n in fitted for n in names],
                             "real_crossed_MB": [0.0 if n in alone else 1.0 for n in names]})

    # s0..s3 held out and split: ranks (1, 2, 3, 4) then (2, 1, 3, 4): 1 - 6 * 2 / (4 * 15) = 0.8; s4 is
    # fitted, s5 runs on one worker, s6 only measured in run 1: none of them counts
    one = rows(1, [1.0, 2.0, 3.0, 4.0, 9.0, 0.5, 7.0], fitted=("s4",), alone=("s5",))
    two = rows(2, [2.0, 1.0, 3.0, 4.0, 0.1, 9.0], fitted=("s4",), alone=("s5",))
    assert run_to_run_rank(pd.concat([one, two])) == {("m", 8): 0.8}
    # the simulator's errors: 0, 0.1, 0.2, 0.3 then 0, -0.1, -0.2, -0.3 on s0..s3: missed in the opposite order
    assert run_to_run_rank(pd.concat([one, two]), "step_error") == {("m", 8): -1.0}
    assert run_to_run_rank(one) == {}  # one run: nothing to compare
