"""Simulating a finished validation again from its folder, on a hand-built one."""

import numpy as np
import pandas as pd
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import TrinityError
from trinity.fileio import write_yaml
from trinity.graph import save_graph
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.placement import Strategy
from trinity.runtime.resimulate import _placement, compare, main, parts, resimulate_part

from conftest import make_cluster

# a (10 us) on d0 sends 2000 B (4 us) to b (5 us) and 1000 B (3 us) to c (1 us)
GRAPH = OpGraph([Op("a", "A", 10.0, output_bytes=(2000, 1000)), Op("b", "B", 5.0), Op("c", "C", 1.0)],
                [Edge("a", "b", 0), Edge("a", "c", 1)])
# simulated us with one stream / two: both ends [0, 1, 1] 20 / 19, [0, 1, 0] 19 / 19, [0, 0, 1] 15 / 15
STRATEGIES = {"both": [0, 1, 1], "b-only": [0, 1, 0], "c-only": [0, 0, 1], "single": [0, 0, 0]}
REAL_MS = {"both": 0.019, "b-only": 0.019, "c-only": 0.015, "single": 0.016}


def validation_folder(root, cluster):
    """One run at batch 4: results.csv (simulated at twice the measured time: stale on purpose), strategies,
    calibration."""
    (root / "calibration").mkdir(parents=True)
    write_yaml(root / "calibration" / "cluster.yaml", cluster.to_dict())
    save_graph(GRAPH, root / "calibration" / "graph.json.gz")
    for name, p in STRATEGIES.items():
        Strategy.from_array(GRAPH, cluster, np.array(p)).save(root / "strategies" / f"{name}.json")
    pd.DataFrame([{"batch": 4, "run": 1, "strategy": name, "calibration_set": False, "sim_step_ms": 2 * REAL_MS[name],
                   "sim_comm_MB": 0.0, "real_step_ms": REAL_MS[name],
                   "real_crossed_MB": 0.0 if name == "single" else 1.0,
                   "step_error": 1.0, "comm_error": 0.0, "overridden": 0} for name in STRATEGIES]
                 ).to_csv(root / "results.csv", index=False)


def test_compare_recomputes_the_simulated_step_times(tmp_path):
    validation_folder(tmp_path, make_cluster(2))
    row = compare(tmp_path, link_streams=2).iloc[0]
    assert (row["run"], row["batch"], row["held_out_split"]) == (1, 4, 3)
    assert row["committed_step_error_median"] == 1.0 and row["committed_rank_correlation"] == pytest.approx(1.0)
    # one stream: errors 1/19, 0, 0; two streams: all 0 and the order exactly the workers'
    assert row["now_step_error_median"] == 0.0
    assert row["now_step_error_p90"] == pytest.approx(0.8 / 19)  # pandas' linear quantile of (0, 0, 1/19)
    assert row["now_rank_correlation"] == pytest.approx(np.sqrt(3) / 2)  # ranks (3, 2, 1) against (2.5, 2.5, 1)
    assert row["streams2_step_error_median"] == 0.0 and row["streams2_step_error_p90"] == 0.0
    assert row["streams2_rank_correlation"] == pytest.approx(1.0)


def test_compare_anchors_a_step_over_both_workers_to_the_fit_sets_split_rows(tmp_path):
    cluster = make_cluster(2)
    validation_folder(tmp_path, cluster)
    Strategy.from_array(GRAPH, cluster, np.array([0, 1, 0])).save(tmp_path / "strategies" / "held.json")
    table = pd.read_csv(tmp_path / "results.csv")
    # the fit set measured 5, 2 and 9 us above its simulation (20, 19, 15 us); single as simulated (16 us)
    table["source"] = table["strategy"].map({"both": "metis", "b-only": "m-etf", "c-only": "expert",
                                             "single": "single"})
    table["calibration_set"] = True
    table["real_step_ms"] = table["strategy"].map({"both": 0.025, "b-only": 0.021, "c-only": 0.024, "single": 0.016})
    held = {**table.iloc[1].to_dict(), "strategy": "held", "source": "random", "calibration_set": False,
            "real_step_ms": 0.024}  # b-only's placement again, held out: 19 us simulated, 24 measured
    pd.concat([table, pd.DataFrame([held])]).to_csv(tmp_path / "results.csv", index=False)
    row = compare(tmp_path, synced=True).iloc[0]
    assert row["synced_drift_ms"] == pytest.approx(0.005)  # the median of 5, 2 and 9 us
    assert row["now_step_error_median"] == pytest.approx(5 / 24)
    assert row["synced_step_error_median"] == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(compare(tmp_path).iloc[0].get("synced_drift_ms", np.nan))  # not asked: not there
    # a part its validation anchored (5 us added to every split): "now" is without it, "synced" as it was
    anchored = pd.read_csv(tmp_path / "results.csv")
    split = anchored["strategy"] != "single"
    anchored["step_sync_drift_ms"], anchored["sync_added_ms"] = 0.005, np.where(split, 0.005, 0.0)
    anchored.loc[split, "sim_step_ms"] += 0.005
    anchored.to_csv(tmp_path / "results.csv", index=False)
    again = compare(tmp_path, synced=True).iloc[0]
    assert again["synced_drift_ms"] == pytest.approx(0.005)
    assert again["now_step_error_median"] == pytest.approx(5 / 24)


def test_op_times_are_anchored_to_the_one_worker_step_of_the_same_rounds(tmp_path):
    validation_folder(tmp_path, make_cluster(2))
    table = pd.read_csv(tmp_path / "results.csv")
    # the whole step on one worker (16 us simulated) measured at 24 us in the part's rounds: every op x1.5
    table["source"], table["anchor_scale"] = table["strategy"], 2.0  # the file's scale is not read
    table.loc[table["strategy"] == "single", "real_step_ms"] = 0.024
    table.to_csv(tmp_path / "results.csv", index=False)
    rows = resimulate_part(tmp_path, make_cluster(2)).set_index("strategy")
    assert (rows["anchor_scale"] == 1.5).all()
    # a 15 us, b 7.5, c 1.5, transfers as before: b-only 15 + 1.5 on d0, b at 15 + 4 -> 26.5; c-only 15 + 7.5
    assert rows.loc[["b-only", "c-only", "single"], "sim_step_ms"].tolist() == pytest.approx([0.0265, 0.0225, 0.024])
    assert rows.loc["single", "step_error"] == pytest.approx(0.0)
    # the anchor is the calibration's now: no held-out figure counts it
    assert rows["calibration_set"].to_dict() == {"both": False, "b-only": False, "c-only": False, "single": True}
    # beside it, the op times as they are (as before the round anchor): the held-out errors of the first test
    row = compare(tmp_path, unanchored=True).iloc[0]
    assert row["now_anchor_scale"] == 1.5 and np.isnan(row["unanchored_anchor_scale"])
    assert row["unanchored_step_error_median"] == 0.0 and row["unanchored_step_error_p90"] == pytest.approx(0.8 / 19)
    # anchored: c-only 22.5 against 15, b-only 26.5 against 19, both 28 against 19 (a 15, b's 4 us, then b 7.5
    # on d1 while c's 3 us cross, c 1.5 after b): errors 0.5, 7.5 / 19 and 9 / 19
    assert row["now_step_error_median"] == pytest.approx(9 / 19)
    main([str(tmp_path), "--unanchored", "--csv", str(tmp_path / "anchor.csv")])
    written = pd.read_csv(tmp_path / "anchor.csv")
    assert list(written.columns[:3]) == ["model", "run", "batch"] and written["unanchored_step_error_median"][0] == 0.0
    table.loc[table["strategy"] == "single", "real_step_ms"] = 0.016 * 3  # x3: the machine changed
    table.to_csv(tmp_path / "results.csv", index=False)
    with pytest.raises(TrinityError, match=r"0\.0 ms in the validation's rounds and at 0\.0 ms as the "
                                           r"calibration simulates it \(x3\.00, outside") as err:
        resimulate_part(tmp_path, make_cluster(2))
    assert err.value.field == "calibration"


def test_runs_and_batches_are_found_and_bad_input_refused(tmp_path, capsys):
    cluster = make_cluster(2)
    validation_folder(tmp_path, cluster)
    (tmp_path / "run2").mkdir()
    validation_folder(tmp_path / "run2", cluster)
    found = [(run, batch, part.relative_to(tmp_path).as_posix()) for run, batch, part, _ in parts(tmp_path)]
    assert found == [(1, None, "."), (2, None, "run2")]
    with pytest.raises(TrinityError, match="link_streams"):
        compare(tmp_path, link_streams=0)
    with pytest.raises(TrinityError, match="results.csv"):
        parts(tmp_path / "calibration")
    main([str(tmp_path)])
    assert "now_step_error_median" in capsys.readouterr().out


def test_a_strategy_made_for_another_graph_is_refused(tmp_path):
    validation_folder(tmp_path, make_cluster(2))
    other = OpGraph([Op("a", "A", 1.0), Op("b", "B", 1.0), Op("c", "C", 1.0)], [])
    Strategy.from_array(other, make_cluster(2), np.array([0, 1, 1])).save(tmp_path / "strategies" / "both.json")
    with pytest.raises(TrinityError, match="graph_digest"):
        compare(tmp_path)


def test_cluster_file_terms_are_kept(tmp_path):
    shared = cluster_from_dict({**make_cluster(2).to_dict(), "step_sync_us": 1000.0})
    validation_folder(tmp_path, shared)
    row = compare(tmp_path).iloc[0]  # 1 ms more on each: errors 1.020/0.019, 1.019/0.019, 1.015/0.015 - 1
    assert row["now_step_error_median"] == pytest.approx(1.020 / 0.019 - 1)


def model_made_validation(root, **model_terms):
    """A one-run validation whose fit placers' (round-robin, m-ETF, m-TOPO) and held-out (4 random) strategies'
    times are made by a known model: the base cluster (the measured latency, no CPU share) with ``model_terms``.
    Returns (graph, base cluster, the model's cluster, results.csv's rows)."""
    import dataclasses

    from trinity.fileio import write_json
    from trinity.graph.synthetic import layered_dag
    from trinity.placers import place
    from trinity.sim import Simulator

    g = layered_dag(40, 90, seed=5, colocated_fraction=0.0, control_fraction=0.3)
    base = cluster_from_dict({"name": "w", "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(2)],
                              "default_link": {"bandwidth_GBps": 2.0, "latency_us": 200.0}})
    model = dataclasses.replace(base, **model_terms)
    truth = Simulator(g, model)
    fit_set = {name: place(name, g, base).placement for name in ("round-robin", "m-etf", "m-topo")}
    held_out = {f"random{s}": place("random", g, base, seed=s).placement for s in range(4)}
    calibration = root / "calibration"
    calibration.mkdir(parents=True)
    # the committed cluster file: a stale fit (all the CPU share, one stream, a fitted co-running slowdown) the
    # refit must not read: it starts from the co-running slowdown as measured
    write_yaml(calibration / "cluster.yaml", {**base.to_dict(), "send_cpu_share": 0.9, "corun_slowdown": 0.3})
    save_graph(g, calibration / "graph.json.gz")
    write_json(calibration / "calibration.json", {
        "link": {"latency_us": 200.0}, "shared_machine": {"corun_slowdown": 0.0},
        "transfer_fit": {"measured_step_us": {n: truth.simulate(p).step_time_us for n, p in fit_set.items()}}})
    rows = []
    for name, p in {**fit_set, **held_out}.items():
        Strategy.from_array(g, base, p).save(root / "strategies" / f"{name}.json")
        rows.append({"batch": 8, "run": 1, "strategy": name, "calibration_set": name in fit_set, "sim_step_ms": 1.0,
                     "sim_comm_MB": 0.0, "real_step_ms": truth.simulate(p).step_time_us / 1e3, "real_crossed_MB": 1.0,
                     "step_error": 0.0, "comm_error": 0.0, "overridden": 0})
    pd.DataFrame(rows).to_csv(root / "results.csv", index=False)
    return g, base, model, rows


def test_refit_recovers_the_transfer_model_from_the_calibration_measurements(tmp_path):
    """Fit placers' and held-out strategies' times made by a known model (the measured latency, 4 streams, control
    edges sent, newest runnable op first, a received tensor's readers last): today's rule finds it again and judges
    the held-out ones exactly; one stream cannot, nor free control edges, nor a stack with arrivals on top."""
    from trinity.runtime.resimulate import refit
    from trinity.sim import Simulator

    g, base, model, rows = model_made_validation(tmp_path, link_streams=4, control_transfers=True,
                                                 ready_order="lifo-arrivals-last")
    fits, figures = refit(tmp_path)
    fits, figures = fits.set_index("rule"), figures.set_index("rule")
    today = "mean-streams-control-lifo-latency-measured-arrivals-last"
    lifo = "mean-streams-control-lifo-latency-measured"
    corun = today + "-corun-fitted"
    assert list(fits.index) == ["median-1stream", "mean-1stream", "median-streams", "mean-streams",
                                "mean-streams-control", "mean-streams-control-lifo", lifo, today, corun,
                                corun + "-bytes", corun + "-bytes-receive", corun + "-bytes-receive-held-sends"]
    chosen = fits.loc[today]
    assert (chosen["send_cpu_share"], chosen["latency_scale"], chosen["link_streams"], chosen["fit_error"]) == (
        0.0, 1.0, 4, 0.0)
    # the times were made with no co-running slowdown, the cluster's own: fitting one keeps it
    assert fits.loc[corun, ["link_streams", "corun_slowdown", "fit_error"]].tolist() == [4, 0.0, 0.0]
    # no CPU share made them: shares of the bytes find the same, and no receiver's share
    assert fits.loc[corun + "-bytes-receive", ["send_cpu_share", "receive_cpu_share", "link_streams", "fit_error"]
                    ].tolist() == [0.0, 0.0, 4, 0.0]
    # times made without the workers' held sends do not fit exactly with them: the fit sees them too
    assert fits.loc[corun + "-bytes-receive-held-sends", "fit_error"] > 0
    # the same stack with the arrivals on top does not fit exactly: the ready order is seen by the fit
    assert (fits.loc[["mean-streams-control-lifo", lifo], "fit_error"] > 0).all()
    assert figures.loc[today, "step_error_median"] == 0.0
    assert figures.loc[today, "rank_correlation"] == pytest.approx(1.0)
    assert (fits.loc[["median-1stream", "mean-1stream"], "link_streams"] == 1).all()
    assert (fits.loc[["mean-1stream", "mean-streams", "mean-streams-control"], "fit_error"] > 0).all()
    # the validation's own rows of the calibration set carry the same times here: the same fit
    fits = refit(tmp_path, "validation")[0].set_index("rule")
    chosen = fits.loc[today]  # the times went through ms and back: exact to rounding
    assert (chosen["latency_scale"], chosen["link_streams"]) == (1.0, 4)
    assert chosen["fit_error"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(TrinityError, match="measured_from"):
        refit(tmp_path, "elsewhere")
    main([str(tmp_path), "--refit", "calibration", "--csv", str(tmp_path / "rules.csv")])
    rules = pd.read_csv(tmp_path / "rules.csv")
    assert list(rules.columns[:5]) == ["model", "measured_from", "run", "batch", "rule"] and len(rules) == 12
    assert (rules["folder"] == str(tmp_path)).all()  # which validation, where several share a model's name
    assert rules.set_index("rule").loc[today, "link_streams"] == 4
    # the validation's rounds ran every op 1.5x slower, its one-worker step among them: fitted on the op times
    # anchored to those rounds (as its rows are simulated), the same model is found again exactly
    from trinity.runtime.calibrate import times_scaled

    slow = Simulator(times_scaled(g, 1.5), model)
    single = np.zeros(len(g.ops), np.int64)
    Strategy.from_array(g, base, single).save(tmp_path / "strategies" / "single.json")
    table = pd.DataFrame(rows + [{**rows[0], "strategy": "single", "calibration_set": True}])
    table["source"] = table["strategy"].str.rstrip("0123456789")
    table["real_step_ms"] = [slow.simulate(_placement(tmp_path, n, g)).step_time_us / 1e3 for n in table["strategy"]]
    table.to_csv(tmp_path / "results.csv", index=False)
    chosen = refit(tmp_path, "validation")[0].set_index("rule").loc[today]
    assert (chosen["send_cpu_share"], chosen["latency_scale"], chosen["link_streams"]) == (0.0, 1.0, 4)
    assert chosen["fit_error"] == pytest.approx(0.0, abs=1e-12)


def test_refit_places_the_fit_set_on_the_op_times_it_was_placed_on(tmp_path, monkeypatch):
    """`calibrate` places its fit set, then scales the op times to the anchor and saves that graph: the
    refit places the fit set on the saved graph's times over the anchor's scale (m-ETF places otherwise)."""
    from types import SimpleNamespace

    import trinity.placers
    from trinity.fileio import write_json
    from trinity.runtime.resimulate import FIT_RULES, refit_run

    seen = []

    def place_each(names, graph, cluster):
        seen.append([op.compute_us for op in graph.ops])
        return {n: SimpleNamespace(placement=np.zeros(graph.n_ops, dtype=int)) for n in names}, {}

    monkeypatch.setattr(trinity.placers, "place_each", place_each)
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    write_yaml(calibration / "cluster.yaml", make_cluster(2).to_dict())
    save_graph(GRAPH, calibration / "graph.json.gz")  # a 10, b 5, c 1 us: the anchored times
    report = {"link": {"latency_us": 2.0}, "transfer_fit": {"measured_step_us": {"metis": 16.0}}}
    write_json(calibration / "calibration.json", {**report, "anchor": {"scale": 2.0}})
    refit_run(tmp_path, FIT_RULES[-1])
    write_json(calibration / "calibration.json", report)  # before anchors: the times as saved
    refit_run(tmp_path, FIT_RULES[-1])
    assert seen == [[5.0, 2.5, 0.5], [10.0, 5.0, 1.0]]


def test_rounds_refit_fits_each_runs_own_batch_and_carries_the_fit_to_its_other_batches(tmp_path):
    """Every strategy's times made by a known transfer model (a 0.3 send share, both workers 20% slower together)
    that the calibration's file misses (0.9, none): the transfer model refitted to the fit set's rows of the run's
    rounds at its own batch finds it, and judges the held-out strategies exactly there and at the other batch."""
    import dataclasses

    from trinity.graph.synthetic import layered_dag
    from trinity.placers import place
    from trinity.sim import Simulator

    g = layered_dag(40, 90, seed=5, colocated_fraction=0.0, control_fraction=0.3)
    base = cluster_from_dict({"name": "w", "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(2)],
                              "default_link": {"bandwidth_GBps": 2.0, "latency_us": 200.0},
                              "control_transfers": True, "ready_order": "lifo-arrivals-last"})
    truth = Simulator(g, dataclasses.replace(base, send_cpu_share=0.3, corun_slowdown=0.2))
    strategies = {**{name: (name, place(name, g, base).placement) for name in ("round-robin", "m-etf", "m-topo")},
                  "single": ("single", np.zeros(len(g.ops), np.int64)),
                  **{f"random{s}": ("random", place("random", g, base, seed=s).placement) for s in range(4)}}
    for part, batch in ((tmp_path, 64), (tmp_path / "batch8", 8)):
        (part / "calibration").mkdir(parents=True)
        save_graph(g, part / "calibration" / "graph.json.gz")
        rows = []
        for name, (source, p) in strategies.items():
            Strategy.from_array(g, base, p).save(part / "strategies" / f"{name}.json")
            rows.append({"batch": batch, "run": 1, "strategy": name, "source": source,
                         "calibration_set": source != "random", "sim_step_ms": 1.0, "sim_comm_MB": 0.0,
                         "real_step_ms": truth.simulate(p).step_time_us / 1e3,
                         "real_crossed_MB": 0.0 if name == "single" else 1.0, "step_error": 0.0, "comm_error": 0.0,
                         "overridden": 0})
        pd.DataFrame(rows).to_csv(part / "results.csv", index=False)
    write_yaml(tmp_path / "calibration" / "cluster.yaml", {**base.to_dict(), "send_cpu_share": 0.9})
    table = compare(tmp_path, rounds_refit=True).set_index("batch")
    assert list(table.index) == [64, 8] and (table["held_out_split"] == 4).all()
    assert (table["now_step_error_median"] > 0.01).all()  # the calibration's file: a 0.9 share, no slowdown
    assert (table["rounds_refit_step_error_median"] == 0.0).all()  # batch 8 fitted nothing: batch 64's fit
    assert (table["rounds_refit_step_error_p90"] == 0.0).all()
    assert table["rounds_refit_rank_correlation"].tolist() == pytest.approx([1.0, 1.0])
    assert table["rounds_refit_send_cpu_share"].tolist() == pytest.approx([0.3, 0.3])
    assert table["rounds_refit_corun_slowdown"].tolist() == [0.2, 0.2]
