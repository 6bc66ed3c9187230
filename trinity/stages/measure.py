"""Stage `measure`: one pipeline-parallel method's plan trained for real on local torch.distributed
processes, beside the cost model's prediction of it.

The plan is the method's seed-0 plan for ``pipeline_parallel.measure.cluster``, a cluster of local
processes: each rank is slowed by (fastest device's speed / its own), as that cluster's speeds say.
Out: ``results/measure/<model>/<method>/`` (summary.json, the ranks' logs) and ``<method>.metrics.json``.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from trinity.fileio import read_json, write_json
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.pipeline_parallel import PipelinePlan, measure, measure_data_parallel
    from trinity.profile.layers import LayerProfile

    m = cfg.pipeline_parallel.measure
    planned = config.Job(job.model, str(m.cluster), job.method, 0)
    folder = config.partition_dir(cfg, planned)
    predicted = read_json(config.require(folder / "metrics.json", "partition",
                                         f"{job.model}-{m.cluster}-{job.method}-0"))
    cluster = config.cluster(cfg, str(m.cluster))
    fastest = max(d.speed for d in cluster.devices)
    slowdown = [fastest / d.speed for d in cluster.devices]
    spec = cfg.models[job.model]
    profile = LayerProfile.load(config.require(config.layers_file(cfg, job.model), "layers", job.model))
    out = config.measure_dir(cfg, job)
    common = dict(steps=int(m.steps), warmup=int(m.warmup), slowdown=slowdown, timeout_s=float(m.timeout_s),
                  out_dir=out, options=OmegaConf.to_container(spec.options), threads=1)
    if (folder / "plan.json").exists():
        plan = PipelinePlan.load(folder / "plan.json")
        measured = measure(plan, spec.name, profile.batch, profile=profile, cluster=cluster, **common)
    else:  # data parallelism over every device
        measured = measure_data_parallel(spec.name, profile.batch, **common)
    real_ms, sim_ms = measured["step_time_us"] / 1e3, predicted["step_time_ms"]
    metrics = {"model": job.model, "cluster": str(m.cluster), "method": job.method, "plan": predicted["plan"],
               "slowdown": slowdown, "real_step_ms": real_ms, "sim_step_ms": sim_ms,
               "step_error": (sim_ms - real_ms) / real_ms, "real_comm_share": measured.get("comm_share"),
               "sim_comm_share": predicted["comm_share"], "real_memory_MB": [b / 1e6 for b in measured["memory_bytes"]],
               "sim_memory_MB": [g * 1e3 for g in predicted["memory_per_device_GB"]], "loss": measured.get("loss")}
    write_json(out / "metrics.json", metrics)
    write_json(config.metrics_beside(out),
               {k: v for k, v in metrics.items() if not isinstance(v, list)})
    tracker.log_metrics({"real/step_ms": real_ms, "sim/step_ms": sim_ms, "sim/step_error": metrics["step_error"],
                         **({"real/comm_share": metrics["real_comm_share"]} if metrics["real_comm_share"] is not None
                            else {})}, step=0)
    tracker.log_artifact(out / "metrics.json")
    print(f"{job.method} on {job.model}, {m.cluster} for real: {real_ms:.1f} ms per step (predicted {sim_ms:.1f} ms, "
          f"{metrics['step_error']:+.0%}) -> {out}")
