"""Run pipeline plans and data parallelism for real on local processes (`trinity.runtime.ranks`).

`measure` starts one rank per stage of a plan (`trinity.pipeline_parallel.run`), `measure_data_parallel`
one rank per device; rank r of a plan runs on device ``plan.devices[r]`` and so is throttled by that
device's ``slowdown`` factor. Given the ``cluster`` the ranks emulate, each rank runs in its device's
node, and traffic between nodes crosses the cluster's inter-node link shaped by the kernel
(`trinity.runtime.links.cluster_network`); without one, every rank talks over loopback.
`local_cluster` is the cluster those processes form for the cost model: device i has speed
1 / slowdown[i] (speed 1 = one process with ``threads`` torch threads, as profiled).

Measured figures (all from the same steps):

* ``step_time_us``: median over the timed steps of rank 0's barrier-to-barrier step time;
* ``idle_us`` (median): time of the step during which no rank computes (every rank's forward,
  backward, loss and update blocks, from a clock the local processes share): the measured
  counterpart of the cost model's exposed communication (data moving, ranks waiting for it) plus
  the barriers' own cost; ``comm_share`` = idle / step;
* ``memory_bytes``: per rank, maximum resident set size (``getrusage``) minus the resident size
  before the model was built (the interpreter and torch's own libraries), i.e. what training added.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Sequence

from trinity.cluster import Cluster, cluster_from_dict
from trinity.fileio import write_json
from trinity.pipeline_parallel.cost import _union_length
from trinity.pipeline_parallel.plan import PipelineError, PipelinePlan

MODULE = "trinity.pipeline_parallel.run"


def local_cluster(slowdown: Sequence[float], *, base_speed: float | None = None, bandwidth_GBps: float = 2.0,
                  latency_us: float = 100.0, memory_GB: float = 8.0, name: str = "local") -> Cluster:
    """Local processes as devices: device i at speed base_speed / slowdown[i]; gloo loopback links
    (DESIGN.md: ~0.1 ms for a small tensor, ~2 GB/s for large ones). ``base_speed`` (default
    min(1, cores / processes)) accounts for processes sharing this machine's cores."""
    import os
    if base_speed is None:
        base_speed = min(1.0, (os.cpu_count() or 1) / max(1, len(slowdown)))
    if not slowdown or any(f < 1 for f in slowdown):
        raise PipelineError(f"need one factor >= 1 per device, got {list(slowdown)}", field="slowdown")
    return cluster_from_dict({
        "name": name,
        "devices": [{"name": f"rank{i}x{f:g}", "kind": "cpu", "speed": base_speed / f, "memory_GB": memory_GB}
                    for i, f in enumerate(slowdown)],
        "default_link": {"bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us}}, name)


def _idle_per_step(results: list[dict]) -> list[float]:
    """Per timed step: its length minus the union of every rank's compute intervals within it."""
    out = []
    for k, (t0, t1) in enumerate(results[0]["windows"]):
        busy = [(max(a, t0), min(b, t1)) for r in results for a, b in r["compute_intervals"][k]]
        covered = sum(b - a for a, b in _union_length(busy))
        out.append(max(0.0, (t1 - t0) - covered) * 1e6)
    return out


def _summary(results: list[dict], extra: dict) -> dict:
    idle = _idle_per_step(results)
    step = results[0]["median_step_us"]
    losses = [r["loss"] for r in results if r.get("loss") is not None]
    mem = [max(0, r["max_rss_bytes"] - r["rss_before_model_bytes"]) for r in results]
    return {
        **extra,
        "step_time_us": step,
        "step_us": results[0]["step_us"],
        "idle_us": statistics.median(idle) if idle else 0.0,
        "comm_share": statistics.median(idle) / step if idle and step > 0 else 0.0,
        "busy_us": [r["busy_us"] for r in results],
        "loss": losses[-1] if losses else None,
        "memory_bytes": mem,
        "max_rss_bytes": [r["max_rss_bytes"] for r in results],
        **({"allreduce_us": statistics.median(r["allreduce_us"] for r in results)}
           if all("allreduce_us" in r for r in results) else {}),
    }


def _common_args(model_name: str, batch: int, steps: int, warmup: int, options: dict | None) -> list[str]:
    if steps < 1:
        raise PipelineError(f"must be >= 1, got {steps}", field="steps")
    if warmup < 0:
        raise PipelineError(f"must be >= 0, got {warmup}", field="warmup")
    return ["--model", model_name, "--batch", str(batch), "--options", json.dumps(options or {}),
            "--steps", str(steps), "--warmup", str(warmup)]


def _run(args: list[str], devices: Sequence[int], cluster: Cluster | None, out_dir: Path, timeout_s: float,
         threads: int) -> list[dict]:
    """One rank per entry of ``devices``, in that device's node of ``cluster`` (module docstring)."""
    from trinity.runtime.links import cluster_network
    from trinity.runtime.ranks import run_ranks
    node, link = cluster_network(cluster) if cluster is not None else ([0] * (max(devices) + 1), None)
    return run_ranks(MODULE, args, len(devices), out_dir=out_dir, timeout_s=timeout_s, threads=threads,
                     rank_nodes=[node[d] for d in devices], link=link)


def measure(plan, model_name: str, batch: int, *, steps: int = 10, warmup: int = 2,
            slowdown: Sequence[float] = (), timeout_s: float = 300.0, out_dir: str | Path,
            options: dict | None = None, threads: int = 1, profile=None, cluster: Cluster | None = None,
            extra_args: Sequence[str] = ()) -> dict:
    """Train ``plan`` for real (one local rank per stage and replica); the measured figures (module docstring).

    ``plan`` is a `PipelinePlan` or a `ReplicatedPlan` whose stages all have the same number of replicas
    (run as that many lanes: `trinity.pipeline_parallel.run`). ``slowdown[d]`` throttles the rank of
    device d (default 1). Given a ``profile`` and ``cluster``, a plan without replicas is refused before
    anything starts if a stage does not fit its device's memory.
    """
    from trinity.pipeline_parallel.pipedream import ReplicatedPlan
    if isinstance(plan, ReplicatedPlan):
        K = len(plan.replicas[0])
        if any(len(r) != K for r in plan.replicas):
            raise PipelineError(f"real runs take the same number of replicas for every stage, got "
                                f"{[len(r) for r in plan.replicas]}", field="replicas")
        devices = [plan.replicas[s][k] for s in range(plan.n_stages) for k in range(K)]
        record = plan.to_dict()
        plan = PipelinePlan(plan.bounds, tuple(r[0] for r in plan.replicas), plan.micro_batches, plan.schedule)
        plan.check(batch=batch)
    else:
        K, devices, record = 1, list(plan.devices), plan.to_dict()
        plan.check(batch=batch, n_devices=len(slowdown) if slowdown else None)
        if profile is not None and cluster is not None:
            from trinity.pipeline_parallel.cost import require_fits
            require_fits(plan, profile, cluster, batch)
    factors = [float(slowdown[d]) if slowdown else 1.0 for d in devices]
    out_dir = Path(out_dir)
    plan_path = out_dir / "plan.json"
    plan.save(plan_path)
    args = [*_common_args(model_name, batch, steps, warmup, options), "--mode", "pipeline",
            "--plan", str(plan_path.resolve()), "--replicas", str(K),
            "--slowdown", ",".join(f"{f:g}" for f in factors), *extra_args]
    results = _run(args, devices, cluster, out_dir, timeout_s, threads)
    summary = _summary(results, {"mode": "pipeline", "plan": record, "slowdown": factors})
    write_json(out_dir / "summary.json", summary)
    return summary


def measure_data_parallel(model_name: str, batch: int, devices: Sequence[int] | None = None, *, steps: int = 10,
                          warmup: int = 2, slowdown: Sequence[float] = (), timeout_s: float = 300.0,
                          out_dir: str | Path, options: dict | None = None, threads: int = 1,
                          overlap: bool = False, cluster: Cluster | None = None) -> dict:
    """BSP data parallelism for real on ``devices`` (default: one per slowdown factor); ``overlap``: torch DDP."""
    devices = list(range(len(slowdown) or 1)) if devices is None else list(devices)
    if batch % len(devices):
        raise PipelineError(f"{len(devices)} devices do not divide the batch of {batch}", field="devices")
    factors = [float(slowdown[d]) if slowdown else 1.0 for d in devices]
    args = [*_common_args(model_name, batch, steps, warmup, options), "--mode", "ddp" if overlap else "dp",
            "--slowdown", ",".join(f"{f:g}" for f in factors)]
    out_dir = Path(out_dir)
    results = _run(args, devices, cluster, out_dir, timeout_s, threads)
    summary = _summary(results, {"mode": "ddp" if overlap else "dp", "devices": devices, "slowdown": factors})
    write_json(out_dir / "summary.json", summary)
    return summary
