"""Stage `validate`: run the searched strategies of one model on real TensorFlow workers and hold the
simulator to them.

Every strategy the search stage found, every seed, for a cluster with as many devices as there are
workers (device i runs on worker i) is simulated on the calibrated workers and measured; identical
placements run once. A model the search stage did not run on gets strategies of its own instead:
``validation.placers``, ``validation.search_samples`` strategies sampled along a short Trinity
search and graded blends between pairs of placers (``validation.blends``), found once at the model's
own batch on the first calibration. With ``validation.refit_to_rounds`` the transfer model is fitted
again to the fit placers' rows of the rounds at the model's own batch (`refit_to_rounds`), and that
fit serves the run's other batches. With ``validation.sync_to_rounds`` (off by default) the cost of a
step over both workers is anchored to the fit set's split rows of each part's own rounds (`sync_to_rounds`),
a part's alone. Then the same strategies run at
each of ``validation.batches``, the model exported at that batch: its op times are measured on the
workers again, while the link, transfer and shared-machine terms fitted at the model's own batch are
kept, so nothing is fitted at these batches. All of it runs ``validation.runs`` times, each with fresh
workers and a calibration from scratch.
Out (``results/validate/<model>/``): results.csv, summary.json, sim_vs_real.png, the strategies run
and the calibration; ``batch<b>/`` the same for each extra batch; ``run<r>/`` the same for every run
after the first.
"""

from __future__ import annotations

import os

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


def check_validation(cfg: DictConfig, model: str) -> list[int]:
    """The extra batches to validate ``model`` at, after refusing settings that cannot run: one error
    naming the field."""
    v, spec = cfg.validation, cfg.models[model]
    batches = v.get("batches") or []
    for i, b in enumerate(batches):
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise TrinityError(f"must be a positive integer batch size, got {b!r}", field=f"validation.batches[{i}]")
    batches = [int(b) for b in batches if int(b) != spec.batch]
    if batches and (spec.source or spec.get("synthetic") or spec.batch is None):
        raise TrinityError(f"model {model!r} is not exported from a builder with a batch size: it cannot "
                           "be validated at other batches", field="validation.batches")
    runs = v.get("runs", 1)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise TrinityError(f"must be a positive integer, got {runs!r}", field="validation.runs")
    anchor_range_of(cfg)
    retiming_of(cfg)
    for key in ("refit_to_rounds", "sync_to_rounds"):
        if not isinstance(v.get(key, False), bool):
            raise TrinityError(f"must be true or false, got {v[key]!r}", field=f"validation.{key}")
    if v.cluster_spec is None:
        cores = len(os.sched_getaffinity(0))
        if v.workers * v.threads_per_worker > cores:
            raise TrinityError(f"{v.workers} workers x {v.threads_per_worker} threads need "
                               f"{v.workers * v.threads_per_worker} cores, this machine gives {cores}",
                               field="validation.workers")
    if model not in cfg.run.models and not (v.get("placers") or v.get("search_samples") or v.get("blends")):
        raise TrinityError(f"model {model!r} was not searched (not in run.models) and the validation has no "
                           "strategies of its own for it", field="validation.placers")
    return batches


def retiming_of(cfg: DictConfig) -> dict:
    """``validation.retime_above`` and ``validation.retries`` as `Runner.measure_interleaved` takes them,
    refused in one line naming the field (`check_retiming`)."""
    from trinity.runtime.runner import check_retiming

    v = cfg.validation
    return check_retiming(v.get("retime_above"), v.get("retries", 2), prefix="validation.")


def anchor_range_of(cfg: DictConfig) -> tuple[float, float]:
    """``validation.anchor_range`` (refused in one line if it is not 0 < low <= 1 <= high), else the default."""
    from trinity.runtime.calibrate import ANCHOR_RANGE, check_anchor_range

    value = cfg.validation.get("anchor_range")
    return ANCHOR_RANGE if value is None else check_anchor_range(value)


def own_candidates(cfg: DictConfig, graph, cluster) -> list:
    """A model the search did not run on: ``validation.placers``, ``validation.search_samples`` and
    ``validation.blend_steps`` strategies between each pair of placers in ``validation.blends``."""
    from trinity.placers import place
    from trinity.runtime.validate import blended_strategies, candidate_strategies

    v = cfg.validation
    out = candidate_strategies(graph, cluster, placers=list(v.get("placers") or ()),
                               search_samples=int(v.get("search_samples") or 0), progress=True)
    for i, pair in enumerate(v.get("blends") or []):
        if len(pair) != 2:
            raise TrinityError(f"must be a pair of placers, got {list(pair)}", field=f"validation.blends[{i}]")
        start, end = (place(str(name), graph, cluster).placement for name in pair)
        out += blended_strategies(graph, start, end, int(v.get("blend_steps") or 0), name=f"{pair[0]}-to-{pair[1]}")
    seen, unique = set(), []
    for c in out:  # identical placements run once
        if c.placement.tobytes() not in seen:
            seen.add(c.placement.tobytes())
            unique.append(c)
    return unique


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import read_graph_def

    path = config.require(config.profiled_file(cfg, job.model), "profile", job.model)
    batches = check_validation(cfg, job.model)
    graph = load_graph(path)
    graph_def = read_graph_def(path, graph)
    out = config.validate_dir(cfg, job.model)
    own = None  # strategies of the model's own (found on the first run's calibration, kept for every run)
    runs = {}
    for r in range(1, int(cfg.validation.get("runs", 1)) + 1):
        runs[r], own = _one_run(cfg, job, graph, graph_def, batches, out if r == 1 else out / f"run{r}", r, own,
                                tracker)
    summary = {**runs[1], "runs": {str(r): s for r, s in runs.items()}}
    write_json(out / "summary.json", summary)
    write_json(out.with_name(f"{job.model}.summary.json"), summary)  # DVC's metrics: beside the output folder


def _one_run(cfg, job, graph, graph_def, batches, out, r: int, own, tracker) -> tuple[dict, list | None]:
    """One calibration from scratch on fresh workers, then every strategy at every batch."""
    from trinity.runtime.calibrate import calibration_for
    from trinity.runtime.validate import Candidate
    from trinity.runtime.workers import open_workers

    v, spec = cfg.validation, cfg.models[job.model]
    summaries = {}
    with open_workers(v.workers, v.cluster_spec, threads=v.threads_per_worker) as workers:
        searched = job.model in cfg.run.models
        chosen = candidates(cfg, job.model, graph, workers.n) if searched else []
        if searched and not chosen:
            raise TrinityError(f"no searched strategy for {workers.n} devices: run.clusters has no cluster of "
                               f"{workers.n} devices", field="validation.workers")
        # the fit set is timed as every strategy is below, so a fit and its judges read alike
        cluster, calibrated, report = calibration_for(graph, graph_def, workers, out / "calibration",
                                                      steps=v.profile_steps, fit_rounds=v.rounds,
                                                      fit_steps=v.steps, fit_warmup=v.warmup, progress=True,
                                                      anchor_range=anchor_range_of(cfg), **retiming_of(cfg))
        if report is not None:
            fit, shared = report["transfer_fit"], report["shared_machine"]
            tracker.log_metrics({f"calibration/run{r}/latency_us": report["link"]["latency_us"],
                                 f"calibration/run{r}/bandwidth_GBps": report["link"]["bandwidth_GBps"],
                                 f"calibration/run{r}/send_cpu_share": fit["send_cpu_share"],
                                 f"calibration/run{r}/receive_cpu_share": cluster.receive_cpu_share,
                                 f"calibration/run{r}/request_cpu_us": cluster.request_cpu_us,
                                 f"calibration/run{r}/latency_scale": fit["latency_scale"],
                                 f"calibration/run{r}/link_streams": fit["link_streams"],
                                 f"calibration/run{r}/corun_slowdown": cluster.corun_slowdown,  # fitted
                                 f"calibration/run{r}/corun_slowdown_measured": shared["corun_slowdown"],
                                 f"calibration/run{r}/step_sync_us": shared["step_sync_us"],
                                 f"calibration/run{r}/anchor_scale": report["anchor"]["scale"]}, step=0)
        if not searched:
            own = own if own is not None else own_candidates(cfg, calibrated, cluster)
            chosen = [Candidate(c.name, c.source, c.placement.copy()) for c in own]
        prefix = "" if r == 1 else f"run{r}/"
        summaries[int(spec.batch or 0)], cluster = _measure(
            cfg, job, calibrated, graph_def, workers, cluster, chosen, out, spec.batch, tracker,
            artifacts=prefix.rstrip("/") or None, run=r, refit=bool(v.get("refit_to_rounds", False)))
        for batch in batches:
            summaries[batch] = _other_batch(cfg, job, batch, workers, cluster, out / f"batch{batch}", tracker,
                                            graph, own, f"{prefix}batch{batch}", r)
    return {**summaries[int(spec.batch or 0)], "batches": {str(b): s for b, s in summaries.items()}}, own


def _other_batch(cfg, job, batch: int, workers, cluster, out, tracker, own_graph, own, artifacts, r) -> dict:
    """The same strategies at another batch size (see the module doc)."""
    from trinity.export import export_model
    from trinity.runtime.calibrate import calibration_at_batch
    from trinity.runtime.validate import Candidate

    spec = cfg.models[job.model]
    exported = out / "export" / "graph.json.gz"
    graph = export_model(spec.name, exported, batch, **OmegaConf.to_container(spec.options))
    graph_def = (exported.parent / "graph.graphdef.pb").read_bytes()
    if own is None:
        chosen = candidates(cfg, job.model, graph, workers.n, same_graph=False)
    else:  # the model's own strategies, mapped by op name onto the model at this batch
        chosen = [Candidate(c.name, c.source, Strategy.from_array(own_graph, cluster, c.placement)
                            .to_indices(graph, same_graph=False)) for c in own]
    calibrated = calibration_at_batch(graph, graph_def, workers, cluster, out / "calibration",
                                      steps=cfg.validation.profile_steps, progress=True)
    return _measure(cfg, job, calibrated, graph_def, workers, cluster, chosen, out, batch, tracker,
                    artifacts=artifacts, run=r)[0]


def _measure(cfg, job, graph, graph_def, workers, cluster, chosen, out, batch, tracker, artifacts, run=1,
             refit: bool = False) -> tuple[dict, object]:
    """Simulate and measure ``chosen``; results.csv, summary.json and the scatter plot into ``out`` and
    MLflow (under ``artifacts``, a folder, or at the top). ``refit``: the transfer model fitted again to
    the fit set's rows of these rounds (`refit_to_rounds`); ``validation.sync_to_rounds``: the step over both
    workers anchored to them (`sync_to_rounds`). (summary, the cluster simulated on, but the step's anchoring:
    a part's own)."""
    from trinity.plots import plot_sim_vs_real
    from trinity.runtime.validate import error_summary, refit_to_rounds, sync_to_rounds, validate

    v = cfg.validation
    table = validate(graph, graph_def, workers, cluster, chosen, out_dir=out, rounds=v.rounds, steps=v.steps,
                     warmup=v.warmup, timeout_s=v.timeout_s, progress=True, anchor_range=anchor_range_of(cfg),
                     **retiming_of(cfg))
    before, refitted = None, None
    if refit:  # the held-out figures on the calibration's fit are kept beside the refit's
        before = error_summary(table)
        table, cluster, refitted = refit_to_rounds(graph, cluster, chosen, table)
    if v.get("sync_to_rounds", False):  # the held-out error before it stays in the summary (error_summary)
        table, _ = sync_to_rounds(graph, cluster, chosen, table)
    table.insert(0, "batch", batch)
    table.insert(1, "run", run)
    table.to_csv(out / "results.csv", index=False)
    summary = {"batch": batch, "run": run, **error_summary(table)}
    if refitted is not None:  # the terms the rounds gave, and the held-out figures on the calibration's own
        summary["transfer_refit"] = {"send_cpu_share": refitted.send_cpu_share,
                                     "receive_cpu_share": refitted.receive_cpu_share,
                                     "link_streams": refitted.link_streams, "corun_slowdown": cluster.corun_slowdown,
                                     "mean_error": refitted.error}
        summary.update({f"calibration_fit_{k}": before[k] for k in ("held_out_split_step_error_median",
                                                                     "held_out_split_rank_correlation")})
    write_json(out / "summary.json", summary)
    key = f"validate/b{batch}" if run == 1 else f"validate/run{run}/b{batch}"
    flat = {**summary, **{f"refit_{k}": x for k, x in (summary.get("transfer_refit") or {}).items()}}
    tracker.log_metrics({f"{key}/{k}": x for k, x in flat.items() if isinstance(x, (int, float)) and x == x}, step=0)
    if summary["strategies"]:
        plot_sim_vs_real(table, out / "sim_vs_real.png",
                         title=f"{graph.name}, batch {batch}, on {workers.n} workers, run {run}")
        tracker.log_artifact(out / "sim_vs_real.png", artifacts)
    tracker.log_table(table, f"{artifacts}/sim_vs_real.json" if artifacts else "sim_vs_real.json")
    tracker.log_artifact(out / "results.csv", artifacts)
    print(table[[c for c in ("strategy", "sim_step_ms", "real_step_ms", "step_error") if c in table]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"validate {job.model} at batch {batch}: median |step error| {summary['step_error_median']:.3f} over "
          f"{summary['strategies']} strategies, held-out split {summary['held_out_split_step_error_median']:.3f} "
          f"over {summary['held_out_split_strategies']}, op times x{summary['anchor_scale']:.3f} to the one-worker "
          f"step of these rounds -> {out}")
    if refitted is not None:
        print(f"  the transfer model refitted to the fit set's rows of these rounds: send CPU share "
              f"{refitted.send_cpu_share:.2f}, co-running slowdown {cluster.corun_slowdown:.3f}; held-out split rank "
              f"{before['held_out_split_rank_correlation']:.3f} on the calibration's fit, "
              f"{summary['held_out_split_rank_correlation']:.3f} on this")
    if summary["step_sync_drift_ms"] == summary["step_sync_drift_ms"]:
        print(f"  a step over both workers {summary['step_sync_drift_ms']:+.1f} ms, anchored to the fit set's split "
              f"rows of these rounds; held-out split {summary['held_out_split_unsynced_step_error_median']:.3f} "
              f"without it")
    return summary, cluster
