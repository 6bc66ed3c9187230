"""Stage `measure` (DVC stages ``measure`` and ``measure_dp``): one method trained for real on local
torch.distributed processes, beside the cost model's prediction of it.

The cluster (``job.cluster``, one of ``pipeline_parallel.measure.clusters``) describes local processes:
each rank is slowed by (fastest device's speed / its own). A pipeline-parallel method runs its seed-0
plan for that cluster (the partition stage's); a data-parallel method (DDP, PS, DASO, H-PS) trains the
model itself on every rank (`trinity.data_parallel.measure`). Out: ``results/measure/<model>/<cluster>-
<method>/`` (summary.json, the ranks' logs, metrics.json) and ``<cluster>-<method>.metrics.json`` beside.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from trinity.errors import TrinityError
from trinity.fileio import read_json, write_json
from trinity.machine import MachineWatch
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    m = cfg.pipeline_parallel.measure
    if job.cluster not in m.clusters:
        raise TrinityError(f"{job.cluster!r} is not a cluster of local ranks; those are {list(m.clusters)}",
                           field="job.cluster")
    kind = cfg.methods[job.method].kind
    cluster = config.cluster(cfg, job.cluster)
    spec = cfg.models[job.model]
    profile = config.layer_profile(cfg, job.model)
    out = config.measure_dir(cfg, job)
    options = OmegaConf.to_container(spec.options)
    watch = MachineWatch()  # ranks are pinned to cores, but other jobs may share them: recorded
    if kind == "pipeline-parallel":
        metrics = _pipeline(cfg, job, cluster, spec.name, profile, options, out)
    elif kind == "data-parallel":
        metrics = _data_parallel(cfg, job, cluster, spec.name, profile, options, out)
    else:
        raise TrinityError(f"method {job.method!r} is a {kind} method; measure takes pipeline-parallel or "
                           f"data-parallel methods", field=f"methods.{job.method}.kind")
    metrics.update(watch.metrics())
    real_ms, sim_ms = metrics["real_step_ms"], metrics["sim_step_ms"]
    metrics["step_error"] = None if real_ms is None else (sim_ms - real_ms) / real_ms
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "metrics.json", metrics)
    write_json(config.metrics_beside(out), {k: v for k, v in metrics.items() if not isinstance(v, list)})
    tracker.log_artifact(out / "metrics.json")
    if real_ms is None:
        print(f"{job.method} on {job.model}, {job.cluster}: {metrics['not_run']} -> {out}")
        return
    tracker.log_metrics({"real/step_ms": real_ms, "sim/step_ms": sim_ms, "sim/step_error": metrics["step_error"],
                         **({"real/comm_share": metrics["real_comm_share"]}
                            if metrics.get("real_comm_share") is not None else {})}, step=0)
    print(f"{job.method} on {job.model}, {job.cluster} for real: {real_ms:.1f} ms per step (predicted {sim_ms:.1f} ms, "
          f"{metrics['step_error']:+.0%}) -> {out}")


def _pipeline(cfg, job, cluster, model_name, profile, options, out) -> dict:
    from trinity.data_parallel.measure import slowdown_factors
    from trinity.pipeline_parallel import PipelineError, PipelinePlan, measure, measure_data_parallel
    from trinity.pipeline_parallel.pipedream import ReplicatedPlan

    m = cfg.pipeline_parallel.measure
    folder = config.partition_dir(cfg, config.Job(job.model, job.cluster, job.method, 0))
    predicted = read_json(config.require(folder / "metrics.json", "partition",
                                         f"{job.model}-{job.cluster}-{job.method}-0"))
    slowdown = slowdown_factors(cluster)
    common = dict(steps=int(m.steps), warmup=int(m.warmup), slowdown=slowdown, timeout_s=float(m.timeout_s),
                  out_dir=out, options=options, threads=1)
    base = {"model": job.model, "cluster": job.cluster, "method": job.method, "family": "pipeline",
            "plan": predicted["plan"], "slowdown": slowdown, "sim_step_ms": predicted["step_time_ms"]}
    if (folder / "plan.json").exists():
        plan = PipelinePlan.load(folder / "plan.json")
        measured = measure(plan, model_name, profile.batch, profile=profile, cluster=cluster, **common)
    elif (folder / "replicated_plan.json").exists():  # PipeDream's, with replicated stages
        try:
            measured = measure(ReplicatedPlan.load(folder / "replicated_plan.json"), model_name, profile.batch,
                               cluster=cluster, **common)
        except PipelineError as e:
            if e.field != "replicas":
                raise
            return {**base, "real_step_ms": None, "not_run": f"not run: {e.message}"}
    else:  # the pipeline family's BSP data-parallel baseline over every device
        measured = measure_data_parallel(model_name, profile.batch, cluster=cluster, **common)
    return {"model": job.model, "cluster": job.cluster, "method": job.method, "family": "pipeline",
            "plan": predicted["plan"], "slowdown": slowdown, "real_step_ms": measured["step_time_us"] / 1e3,
            "sim_step_ms": predicted["step_time_ms"], "real_comm_share": measured.get("comm_share"),
            "sim_comm_share": predicted["comm_share"], "real_memory_MB": [b / 1e6 for b in measured["memory_bytes"]],
            "sim_memory_MB": [g * 1e3 for g in predicted["memory_per_device_GB"]], "loss": measured.get("loss")}


def _data_parallel(cfg, job, cluster, model_name, profile, options, out) -> dict:
    from trinity.data_parallel import DataParallelWork, step_cost
    from trinity.data_parallel.cost import compute_us
    from trinity.data_parallel.measure import measure_step

    m = cfg.pipeline_parallel.measure
    method = str(cfg.methods[job.method].method)
    whole_step = config.whole_step_profile(cfg, job.model)
    work = DataParallelWork.from_layers(profile, whole_step=whole_step)
    # the run times one epoch of m.steps steps, which ends with every rank equal: costed as such
    predicted = step_cost(method, cluster, work, epoch_steps=int(m.steps))
    measured = measure_step(method, cluster, model_name, profile.batch, steps=int(m.steps), out_dir=out,
                            options=options, timeout_s=float(m.timeout_s))
    write_json(out / "summary.json", measured)
    return {"model": job.model, "cluster": job.cluster, "method": job.method, "family": "data parallel",
            "plan": f"{method} over {cluster.n_devices} ranks, shares {measured['shares']}",
            "slowdown": measured["slowdown"], "real_step_ms": measured["step_time_us"] / 1e3,
            "sim_step_ms": predicted.step_time_us / 1e3, "real_comm_share": None,
            "sim_comm_share": predicted.comm_share, "real_sent_MB_per_step": measured["sent_bytes_per_step"] / 1e6,
            "sim_sent_MB_per_step": float(predicted.sent_bytes.sum()) / 1e6,
            "sim_memory_MB": [b / 1e6 for b in predicted.memory_bytes], "loss": measured["loss"][-1],
            # the computation term against the ranks' own timers, on the slowest rank: the whole step
            # profile's share, with H-PS's exchange CPU on the same core
            "real_compute_ms": max(measured["compute_us_per_step_per_rank"]) / 1e3,
            "sim_compute_ms": float(compute_us(method, cluster, work).max()) / 1e3}
