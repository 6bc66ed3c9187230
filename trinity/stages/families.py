"""Stage `families`: one model, every strategy family side by side on each of run.families.clusters.

Op placement: the placers of run.families.placers on the model's profiled op graph (and the searches
of the search stage where they ran on that cluster); pipelines: the partition stage's plans (mean over
seeds); data parallelism: the data-parallel cost model on the layer profile. The winner per cluster is
named, with its real step time where the measure stage ran it. Out: ``results/families/<model>.json``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from trinity.fileio import read_json, write_json
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.families import FamilyEntry, data_parallel_entries, op_placement_entries, op_scale, winner
    from trinity.graph import load_graph
    from trinity.profile.layers import LayerProfile
    from trinity.step_cost import StepCost

    fam = cfg.run.families
    graph = load_graph(config.require(config.profiled_file(cfg, job.model), "profile", job.model))
    profile = LayerProfile.load(config.require(config.layers_file(cfg, job.model), "layers", job.model))
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
        entries += data_parallel_entries(profile, cluster, list(cfg.run.data_parallel.methods))
        top = winner(entries)
        rows = [e.row() for e in entries]
        measured = None
        if top is not None and name == cfg.pipeline_parallel.measure.cluster:
            method = top.method if top.family == "pipeline" else ("dp" if top.method == "ddp" else None)
            path = config.measure_dir(cfg, config.Job(job.model, name, method or "", 0))
            if method and (path / "metrics.json").exists():
                measured = read_json(path / "metrics.json")["real_step_ms"]
        reason = "" if measured is not None else _not_measured(top, name, str(cfg.pipeline_parallel.measure.cluster))
        cases.append({"model": job.model, "cluster": name, "entries": rows,
                      "winner": None if top is None else {"family": top.family, "method": top.method,
                                                          "step_time_ms": top.cost.step_time_us / 1e3,
                                                          "real_step_ms": measured, "note": reason}})
        if top is not None:
            tracker.log_metrics({f"families/{name}/winner_step_ms": top.cost.step_time_us / 1e3}, step=0)
            print(f"{job.model} on {name}: {top.family} ({top.method}) wins at {top.cost.step_time_us / 1e3:.2f} ms "
                  f"predicted" + (f", {measured:.2f} ms measured" if measured is not None else f" ({reason})"))
    out = config.families_file(cfg, job.model)
    write_json(out, {"model": job.model, "op_scale": scale, "cases": cases})
    tracker.log_artifact(out)


def _not_measured(top, cluster: str, measured_cluster: str) -> str:
    """Why a case's winner has no real step time."""
    if top is not None and top.family == "op placement":
        return "not measured: op placement runs on TensorFlow workers, this is a PyTorch model"
    if cluster != measured_cluster:
        return f"not measured: the real runs use cluster {measured_cluster}"
    if top is None:
        return "no entry fits"
    return "not measured: the data-parallel runs train the digits model, not this one"
