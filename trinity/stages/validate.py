"""Stage `validate`: run the searched strategies of one model on real TensorFlow workers and hold the
simulator to them.

Every strategy the search stage found for a cluster with as many devices as there are workers
(device i runs on worker i) is simulated on the calibrated workers and measured; identical
placements run once. Out (``results/validate/<model>/``): results.csv, summary.json,
sim_vs_real.png, the strategies run and the calibration.
"""

from __future__ import annotations


import numpy as np
from omegaconf import DictConfig

from trinity.errors import TrinityError
from trinity.fileio import read_json, write_json
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.stages import config


def candidates(cfg: DictConfig, model: str, graph, workers: int) -> list:
    """(name, placement) of every searched strategy that fits ``workers`` devices, duplicates merged."""
    from trinity.runtime.validate import Candidate

    seen: dict[bytes, Candidate] = {}
    for cluster in cfg.run.clusters:
        if len(cfg.clusters[cluster].devices) != workers:
            continue
        for method in [*cfg.run.placers, *cfg.run.searches]:
            job = config.Job(model, cluster, method, 0 if method in cfg.run.placers else int(cfg.run.seeds[0]))
            done = config.search_dir(cfg, job) / "metrics.json"
            if done.exists() and read_json(done).get("infeasible"):
                continue  # e.g. the exact optimum of a graph too large to enumerate
            path = config.require(config.search_dir(cfg, job) / "strategy.json", "search",
                                  f"{model}-{cluster}-{method}-{job.seed}")
            strategy = Strategy.load(path)
            if strategy.meta.get("oom"):
                continue  # nothing to run: the method could not place the graph
            placement = strategy.to_indices(graph, source=str(path))
            key = placement.astype(np.int64).tobytes()
            if key in seen:
                seen[key].name += f"+{method}"
            else:
                seen[key] = Candidate(f"{cluster}-{method}", method, placement)
    return list(seen.values())


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import read_graph_def
    from trinity.plots import plot_sim_vs_real
    from trinity.runtime.calibrate import calibration_for
    from trinity.runtime.validate import error_summary, validate
    from trinity.runtime.workers import open_workers

    path = config.require(config.profiled_file(cfg, job.model), "profile", job.model)
    graph = load_graph(path)
    graph_def = read_graph_def(path, graph)
    v, out = cfg.validation, config.validate_dir(cfg, job.model)
    progress = True  # a bar on a terminal, plain lines in logs
    with open_workers(v.workers, v.cluster_spec, threads=v.threads_per_worker) as workers:
        chosen = candidates(cfg, job.model, graph, workers.n)
        if not chosen:
            raise TrinityError(f"no searched strategy for {workers.n} devices: run.clusters has no cluster of "
                               f"{workers.n} devices", field="validation.workers")
        cluster, calibrated, report = calibration_for(graph, graph_def, workers, out / "calibration",
                                                      steps=v.profile_steps, progress=progress)
        if report is not None:
            tracker.log_metrics({"calibration/latency_us": report["link"]["latency_us"],
                                 "calibration/bandwidth_GBps": report["link"]["bandwidth_GBps"],
                                 "calibration/send_cpu_share": report["transfer_fit"]["send_cpu_share"]}, step=0)
        table = validate(calibrated, graph_def, workers, cluster, chosen, out_dir=out, rounds=v.rounds,
                         steps=v.steps, warmup=v.warmup, timeout_s=v.timeout_s, progress=progress)
    summary = error_summary(table)
    write_json(out / "summary.json", summary)
    write_json(out.with_name(f"{job.model}.summary.json"), summary)  # DVC's metrics: beside the output folder
    tracker.log_metrics({f"validate/{k}": v for k, v in summary.items() if isinstance(v, (int, float)) and v == v},
                        step=0)
    if summary["strategies"]:
        plot_sim_vs_real(table, out / "sim_vs_real.png", title=f"{graph.name} on {workers.n} workers")
        tracker.log_artifact(out / "sim_vs_real.png")
    tracker.log_table(table, "sim_vs_real.json")
    tracker.log_artifact(out / "results.csv")
    print(table[[c for c in ("strategy", "sim_step_ms", "real_step_ms", "step_error") if c in table]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"validate {job.model}: median |step error| {summary['step_error_median']:.3f} over "
          f"{summary['strategies']} strategies -> {out}")
