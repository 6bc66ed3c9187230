"""Stage `families`: one model, every strategy family side by side on each of run.families.clusters.

Op placement: the placers of run.families.placers on the model's profiled op graph (and the searches
of the search stage where they ran on that cluster); pipelines: the partition stage's plans (mean over
seeds); data parallelism: the data-parallel cost model on the layer profile, with the whole-step profile
as its computation term. The winner per cluster is named. On the clusters of local ranks
(``pipeline_parallel.measure.clusters``) every pipeline and data-parallel entry carries its real step time
from the measure stages, and the measured winner is named beside the predicted one. Out: ``results/families/<model>.json``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from trinity.fileio import read_json, write_json
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.families import FamilyEntry, data_parallel_entries, op_placement_entries, op_scale, winner
    from trinity.graph import load_graph
    from trinity.step_cost import StepCost

    fam = cfg.run.families
    graph = load_graph(config.require(config.profiled_file(cfg, job.model), "profile", job.model))
    profile = config.layer_profile(cfg, job.model)
    whole_step = config.whole_step_profile(cfg, job.model)
    scale = op_scale(graph, profile)
    print(f"{job.model}: op times x {scale:.3f}, to the layer profile's total compute")
    cases = []
    for name in fam.clusters:
        cluster = config.cluster(cfg, name)
        entries = op_placement_entries(graph, cluster, list(fam.placers), scale)
        pipelines = {}
        for method in cfg.run.pipeline_parallel.methods:
            if cfg.methods[method].partitioner == "dp":
                continue  # data parallelism is its own family below
            for seed in cfg.run.pipeline_parallel.seeds:
                path = config.partition_dir(cfg, config.Job(job.model, name, method, int(seed))) / "metrics.json"
                pipelines.setdefault(method, []).append(read_json(config.require(
                    path, "partition", f"{job.model}-{name}-{method}-{seed}")))
        for method, runs in pipelines.items():  # the median seed's plan (the only one, if deterministic)
            median = sorted(runs, key=lambda r: r["step_time_ms"])[(len(runs) - 1) // 2]
            entries.append(FamilyEntry("pipeline", method, StepCost.from_dict(median["cost"]),
                                       f"{median['plan']} (median of {len(runs)} seeds)"))
        measured_here = name in cfg.pipeline_parallel.measure.clusters
        # on clusters run for real, the epochs the real runs time; elsewhere the steady state
        epoch_steps = int(cfg.pipeline_parallel.measure.steps) if measured_here else None
        entries += data_parallel_entries(profile, cluster, list(cfg.run.data_parallel.methods), epoch_steps,
                                        whole_step)
        top = winner(entries)
        rows = [e.row() for e in entries]
        if measured_here:
            for row in rows:
                path = config.measure_dir(cfg, config.Job(job.model, name, row["method"], 0)) / "metrics.json"
                if row["family"] != "op placement":
                    row["real_step_ms"] = read_json(config.require(path, "measure", f"{job.model}-{name}-"
                                                                   f"{row['method']}"))["real_step_ms"]
        real = [r for r in rows if r.get("real_step_ms") is not None]
        real_top = min(real, key=lambda r: r["real_step_ms"]) if real else None
        measured = next((r["real_step_ms"] for r in real if top is not None and r["method"] == top.method), None)
        reason = "" if measured is not None else _not_measured(top, measured_here)
        cases.append({"model": job.model, "cluster": name, "entries": rows,
                      "winner": None if top is None else {"family": top.family, "method": top.method,
                                                          "step_time_ms": top.cost.step_time_us / 1e3,
                                                          "real_step_ms": measured, "note": reason},
                      "measured_winner": None if real_top is None else {
                          "family": real_top["family"], "method": real_top["method"],
                          "real_step_ms": real_top["real_step_ms"]}})
        if top is not None:
            tracker.log_metrics({f"families/{name}/winner_step_ms": top.cost.step_time_us / 1e3}, step=0)
            print(f"{job.model} on {name}: {top.family} ({top.method}) wins at {top.cost.step_time_us / 1e3:.2f} ms "
                  f"predicted" + (f", {measured:.2f} ms measured" if measured is not None else f" ({reason})"))
        if real_top is not None:
            tracker.log_metrics({f"families/{name}/measured_winner_step_ms": real_top["real_step_ms"]}, step=0)
            print(f"{job.model} on {name}: measured, {real_top['family']} ({real_top['method']}) is fastest at "
                  f"{real_top['real_step_ms']:.2f} ms (op placement not run: TensorFlow workers only)")
    out = config.families_file(cfg, job.model)
    write_json(out, {"model": job.model, "op_scale": scale, "cases": cases})
    tracker.log_artifact(out)


def _not_measured(top, measured_here: bool) -> str:
    """Why a case's winner has no real step time."""
    if top is None:
        return "no entry fits"
    if top.family == "op placement":
        return "not measured: op placement runs on TensorFlow workers, this is a PyTorch model"
    return "not measured: not a cluster of local ranks (pipeline_parallel.measure.clusters)"
