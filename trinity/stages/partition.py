"""Stage `partition`: one pipeline-parallel method (TAPP, PipeDream, even split, data parallelism) on one
model, cluster and seed, scored by the pipeline cost model; the exact optimum beside it where the plans
are few enough to enumerate.

Every plan is also graded on PipeDream's objective (``pipedream_objective_ms``). PipeDream's own plan is
its published planner's (`trinity.pipeline_parallel.pipedream`); one that replicates a stage is saved as
replicated_plan.json and costed by `predict_replicated`.

Out: ``results/partition/<model>/<cluster>-<method>-s<seed>/`` (plan.json or replicated_plan.json, for
TAPP history.csv) and
``<cluster>-<method>-s<seed>.metrics.json`` beside it.
"""

from __future__ import annotations

import time

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from trinity.errors import TrinityError
from trinity.fileio import atomic_write_bytes, write_json
from trinity.stages import config


def plan_for(cfg: DictConfig, job: config.Job, profile, cluster) -> tuple[object | None, dict]:
    """(the method's plan, or None for data parallelism; what its search did)."""
    from trinity.pipeline_parallel import TappConfig, even_split, pipedream_partition, random_search, tapp_search
    from trinity.pipeline_parallel.pipedream import pipedream_plan

    method, pp = cfg.methods[job.method], cfg.pipeline_parallel
    if method.kind != "pipeline-parallel":
        raise TrinityError(f"method {job.method!r} is not a pipeline-parallel method (kind {method.kind})",
                           field=f"methods.{job.method}.kind")
    shape = {"micro_batches": int(pp.micro_batches), "schedule": str(pp.schedule)}
    options = OmegaConf.to_container(method.options, resolve=True)
    if method.partitioner == "dp":
        return None, {}
    if method.partitioner == "pipedream":  # as published; a plan without replicas in the plain form
        found = pipedream_plan(profile, cluster, **shape, **options)
        return found.plan.as_pipeline() or found.plan, {"planner_objective_ms": found.objective_us / 1e3,
                                                        "replicated": found.plan.replicated}
    if method.partitioner == "even":
        return even_split(profile, cluster, **shape, **options), {}
    if method.partitioner == "bottleneck-dp":  # the exact optimum of PipeDream's objective, heterogeneous devices
        return pipedream_partition(profile, cluster, **shape, **options), {}
    if method.partitioner == "random":
        found = random_search(profile, cluster, **shape, seed=job.seed, **options)
        return found.plan, {"evaluations": found.evaluations}
    if method.partitioner == "tapp":
        found = tapp_search(profile, cluster, **shape, config=config.typed(TappConfig, options, {"seed": job.seed},
                                                                             where=f"methods.{job.method}.options"),
                            show_progress=True)
        return found.plan, {"history": found.history, "evaluations": found.evaluations,
                            "search_seconds": found.seconds, "sampled_best_ms": found.sampled_best_us / 1e3}
    raise TrinityError(f"unknown partitioner {method.partitioner!r}; tapp, pipedream, bottleneck-dp, random, even "
                       f"or dp",
                       field=f"methods.{job.method}.partitioner")


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.pipeline_parallel import count_plans, exhaustive_search, predict, predict_data_parallel
    from trinity.pipeline_parallel.pipedream import ReplicatedPlan, objective_us, predict_replicated

    profile = config.layer_profile(cfg, job.model)
    cluster = config.cluster(cfg, job.cluster)
    pp = cfg.pipeline_parallel
    t0 = time.perf_counter()
    plan, search = plan_for(cfg, job, profile, cluster)
    seconds = search.pop("search_seconds", time.perf_counter() - t0)
    replicated = isinstance(plan, ReplicatedPlan)
    cost = predict_data_parallel(profile, cluster) if plan is None else \
        predict_replicated(plan, profile, cluster) if replicated else predict(plan, profile, cluster)
    out = config.partition_dir(cfg, job)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {"model": job.model, "cluster": job.cluster, "method": job.method, "seed": job.seed,
               "devices": cluster.n_devices, "layers": profile.n_layers, "batch": profile.batch,
               "plan": plan.describe(device_names=cluster.device_names) if plan is not None
               else f"data parallel over {cluster.n_devices} devices",
               **cost.summary(), "lower_bound_ms": cost.lower_bound_us / 1e3,
               "memory_per_device_GB": [round(float(m) / 1e9, 6) for m in cost.memory_bytes],
               "search_seconds": seconds, "cost": cost.to_dict()}
    if plan is not None:  # every plan graded on PipeDream's objective too (on this cluster as it is)
        metrics["pipedream_objective_ms"] = objective_us(plan, profile, cluster) / 1e3
        plan.save(out / ("replicated_plan.json" if replicated else "plan.json"))
        n_plans = count_plans(profile.n_layers, cluster.n_devices)
        if n_plans <= int(pp.exhaustive_max_plans):
            best = exhaustive_search(profile, cluster, micro_batches=int(pp.micro_batches), schedule=str(pp.schedule),
                                     max_plans=int(pp.exhaustive_max_plans))
            metrics.update(optimum_step_time_ms=best.value / 1e3, optimum_plans=best.n_plans,
                           vs_optimum_pct=100 * (cost.step_time_us / best.value - 1))
    if "history" in search:
        atomic_write_bytes(out / "history.csv", pd.DataFrame(
            {"iteration": range(len(search["history"])),
             "charts/best_step_time_ms": [h / 1e3 for h in search.pop("history")]}).to_csv(index=False).encode())
    metrics.update(search)
    write_json(out / "metrics.json", metrics)
    write_json(config.metrics_beside(out), {k: v for k, v in metrics.items()
                                            if k not in ("memory_per_device_GB", "cost")})
    tracker.log_metrics({f"best/{k}": float(v) for k, v in cost.summary().items()}, step=0)
    for name in ("plan.json", "replicated_plan.json", "history.csv", "metrics.json"):
        if (out / name).exists():
            tracker.log_artifact(out / name)
    print(f"{job.method} on {job.model}, {job.cluster} (seed {job.seed}): {metrics['plan']}: "
          f"{metrics['step_time_ms']:.2f} ms predicted, communication share {metrics['comm_share']:.2f}"
          + (f", {metrics['vs_optimum_pct']:+.2f}% from the optimum" if "vs_optimum_pct" in metrics else "")
          + f" -> {out}")
