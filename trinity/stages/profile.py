"""Stage `profile`: run the exported graph here, record per-op costs and fit the cost model
(imported graphs come costed and pass through; a model with ``costs: roofline`` is too large to
run here and takes its per-op times from the device speed models alone)."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from trinity.errors import TrinityError
from trinity.fileio import write_json
from trinity.graph import load_graph, save_graph
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import profile_graph

    src = config.require(config.graph_file(cfg, job.model), "export", job.model)
    out = config.profiled_file(cfg, job.model)
    t0 = time.perf_counter()
    spec = cfg.models[job.model]
    costs = spec.get("costs") or "measured"
    if costs not in ("measured", "roofline"):
        raise TrinityError(f"unknown costs {costs!r}: measured or roofline", field=f"models.{job.model}.costs")
    if spec.source or spec.get("synthetic"):  # costed already
        graph, report = load_graph(src), {"profiled": False}
        save_graph(graph, out)
    elif costs == "roofline":
        graph = roofline_costed(load_graph(src), list(cfg.profile.speed_models), f"models.{job.model}.costs")
        report = {"profiled": False}
        save_graph(graph, out)
    else:
        p = cfg.profile
        graph, report = profile_graph(src, out, steps=p.steps, warmup=p.warmup, threads=p.threads,
                                      progress=True,
                                      kind_speedups={k: float(v) for k, v in p.kind_speedup.items()},
                                      speed_models=list(p.speed_models))
    numbers = {k: v for k, v in _flat(report).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numbers["profile/seconds"] = time.perf_counter() - t0
    write_json(out.with_name("profile.json"), {"ops": graph.n_ops, "edges": graph.n_edges, **numbers})
    tracker.log_metrics({k if k.startswith("profile/") else f"profile/{k}": v for k, v in numbers.items()}, step=0)
    print(f"profile {job.model}: {graph.n_ops} ops costed in {numbers['profile/seconds']:.1f} s -> {out}")


def roofline_costed(graph, kinds: list[str], field: str):
    """The exported graph with its op times from the speed models of ``kinds`` only (none measured here)."""
    from trinity.profile.speed_model import apply_speed_models

    if not kinds:
        raise TrinityError("costs: roofline needs at least one device kind in profile.speed_models", field=field)
    return apply_speed_models(graph, kinds)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flat(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return out
