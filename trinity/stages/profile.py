"""Stage `profile`: run the exported graph here, record per-op costs and fit the cost model
(imported graphs come costed and pass through)."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from trinity.fileio import write_json
from trinity.graph import load_graph, save_graph
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import profile_graph

    src = config.require(config.graph_file(cfg, job.model), "export", job.model)
    out = config.profiled_file(cfg, job.model)
    t0 = time.perf_counter()
    if cfg.models[job.model].source or cfg.models[job.model].get("synthetic"):  # costed already
        graph, report = load_graph(src), {"profiled": False}
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


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flat(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return out
