"""Stage `validate`: run the searched strategies of one model on real TensorFlow workers and hold the
simulator to them.

Every strategy the search stage found, every seed, for a cluster with as many devices as there are
workers (device i runs on worker i) is simulated on the calibrated workers and measured; identical
placements run once. Then the same strategies run at each of ``validation.batches``, the model
exported at that batch: its op times are measured on the workers again, while the link and the
transfer model fitted at the model's own batch are kept, so nothing is fitted at these batches.
Out (``results/validate/<model>/``): results.csv, summary.json, sim_vs_real.png, the strategies run
and the calibration; ``batch<b>/`` the same for each extra batch.
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig, OmegaConf

from trinity.errors import TrinityError
from trinity.fileio import read_json, write_json
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.stages import config


def candidates(cfg: DictConfig, model: str, graph, workers: int, *, same_graph: bool = True) -> list:
    """(name, placement) of every searched strategy, every seed, that fits ``workers`` devices, duplicates
    merged. ``same_graph=False`` maps them by op name onto ``graph``, the model at another batch size."""
    from trinity.runtime.validate import Candidate

    seen: dict[bytes, Candidate] = {}
    methods: dict[bytes, list[str]] = {}  # every method that found the same placement
    for cluster in cfg.run.clusters:
        if len(cfg.clusters[cluster].devices) != workers:
            continue
        jobs = [(m, 0, f"{cluster}-{m}") for m in cfg.run.placers]
        jobs += [(m, int(s), f"{cluster}-{m}-s{s}") for m in cfg.run.searches for s in cfg.run.seeds]
        for method, seed, name in jobs:
            job = config.Job(model, cluster, method, seed)
            done = config.search_dir(cfg, job) / "metrics.json"
            if done.exists() and read_json(done).get("infeasible"):
                continue  # e.g. the exact optimum of a graph too large to enumerate
            path = config.require(config.search_dir(cfg, job) / "strategy.json", "search",
                                  f"{model}-{cluster}-{method}-{seed}")
            strategy = Strategy.load(path)
            if strategy.meta.get("oom"):
                continue  # nothing to run: the method could not place the graph
            placement = strategy.to_indices(graph, source=str(path), same_graph=same_graph)
            key = placement.astype(np.int64).tobytes()
            if key not in seen:
                seen[key], methods[key] = Candidate(name, method, placement), [method]
            elif method not in methods[key]:
                methods[key].append(method)
                seen[key].name += f"+{method}"
    return list(seen.values())


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import read_graph_def
    from trinity.runtime.calibrate import calibration_for
    from trinity.runtime.workers import open_workers

    path = config.require(config.profiled_file(cfg, job.model), "profile", job.model)
    graph = load_graph(path)
    graph_def = read_graph_def(path, graph)
    v, out = cfg.validation, config.validate_dir(cfg, job.model)
    spec = cfg.models[job.model]
    batches = [int(b) for b in v.get("batches") or [] if int(b) != spec.batch]
    if batches and (spec.source or spec.get("synthetic") or spec.batch is None):
        raise TrinityError(f"model {job.model!r} is not exported from a builder with a batch size: it cannot "
                           "be validated at other batches", field="validation.batches")
    summaries = {}
    with open_workers(v.workers, v.cluster_spec, threads=v.threads_per_worker) as workers:
        chosen = candidates(cfg, job.model, graph, workers.n)
        if not chosen:
            raise TrinityError(f"no searched strategy for {workers.n} devices: run.clusters has no cluster of "
                               f"{workers.n} devices", field="validation.workers")
        cluster, calibrated, report = calibration_for(graph, graph_def, workers, out / "calibration",
                                                      steps=v.profile_steps, progress=True)
        if report is not None:
            tracker.log_metrics({"calibration/latency_us": report["link"]["latency_us"],
                                 "calibration/bandwidth_GBps": report["link"]["bandwidth_GBps"],
                                 "calibration/send_cpu_share": report["transfer_fit"]["send_cpu_share"]}, step=0)
        summaries[int(spec.batch or 0)] = _measure(cfg, job, calibrated, graph_def, workers, cluster, chosen, out,
                                                   spec.batch, tracker, artifacts=None)
        for batch in batches:
            summaries[batch] = _other_batch(cfg, job, batch, workers, cluster, out / f"batch{batch}", tracker)
    summary = {**summaries[int(spec.batch or 0)], "batches": {str(b): s for b, s in summaries.items()}}
    write_json(out / "summary.json", summary)
    write_json(out.with_name(f"{job.model}.summary.json"), summary)  # DVC's metrics: beside the output folder


def _other_batch(cfg, job, batch: int, workers, cluster, out, tracker) -> dict:
    """The searched strategies at another batch size (see the module doc)."""
    from trinity.export import export_model
    from trinity.runtime.calibrate import calibration_at_batch

    spec = cfg.models[job.model]
    exported = out / "export" / "graph.json.gz"
    graph = export_model(spec.name, exported, batch, **OmegaConf.to_container(spec.options))
    graph_def = (exported.parent / "graph.graphdef.pb").read_bytes()
    chosen = candidates(cfg, job.model, graph, workers.n, same_graph=False)
    calibrated = calibration_at_batch(graph, graph_def, workers, cluster, out / "calibration",
                                      steps=cfg.validation.profile_steps, progress=True)
    return _measure(cfg, job, calibrated, graph_def, workers, cluster, chosen, out, batch, tracker,
                    artifacts=f"batch{batch}")


def _measure(cfg, job, graph, graph_def, workers, cluster, chosen, out, batch, tracker, artifacts) -> dict:
    """Simulate and measure ``chosen``; results.csv, summary.json and the scatter plot into ``out`` and
    MLflow (under ``artifacts``, a folder, or at the top)."""
    from trinity.plots import plot_sim_vs_real
    from trinity.runtime.validate import error_summary, validate

    v = cfg.validation
    table = validate(graph, graph_def, workers, cluster, chosen, out_dir=out, rounds=v.rounds, steps=v.steps,
                     warmup=v.warmup, timeout_s=v.timeout_s, progress=True)
    table.insert(0, "batch", batch)
    table.to_csv(out / "results.csv", index=False)
    summary = {"batch": batch, **error_summary(table)}
    write_json(out / "summary.json", summary)
    tracker.log_metrics({f"validate/b{batch}/{k}": x for k, x in summary.items()
                         if isinstance(x, (int, float)) and x == x}, step=0)
    if summary["strategies"]:
        plot_sim_vs_real(table, out / "sim_vs_real.png", title=f"{graph.name}, batch {batch}, on {workers.n} workers")
        tracker.log_artifact(out / "sim_vs_real.png", artifacts)
    tracker.log_table(table, f"{artifacts}/sim_vs_real.json" if artifacts else "sim_vs_real.json")
    tracker.log_artifact(out / "results.csv", artifacts)
    print(table[[c for c in ("strategy", "sim_step_ms", "real_step_ms", "step_error") if c in table]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"validate {job.model} at batch {batch}: median |step error| {summary['step_error_median']:.3f} over "
          f"{summary['strategies']} strategies, held-out split {summary['held_out_split_step_error_median']:.3f} "
          f"over {summary['held_out_split_strategies']} -> {out}")
    return summary
