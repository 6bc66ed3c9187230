"""Stage `search`: one method on one model, cluster and seed.

A placer places once; Trinity and Hierarchical search, checkpointing into
``runs/<case>-<digest>/``, outside DVC's outputs (DVC deletes a stage's
outputs before running it), so a search killed mid-way resumes on the next
`dvc repro`. The digest covers everything that shapes the search (graph,
features, cluster, every hyperparameter) and where it reports (MLflow
experiment, results folder): a changed setting starts a fresh folder rather
than resuming another search's state.

A local search (simulated annealing) spends a budget of simulator calls from a placer's
placement, the same-budget peer of the searches.

Out (``results/search/<model>/<cluster>-<method>-s<seed>/``): strategy.json,
metrics.json, for searches history.csv and search_curve.png, for local searches history.csv.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from trinity.features import OpFeatures
from trinity.fileio import atomic_write_bytes, write_json
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.stages import config
from trinity.sim import Simulator


def run_dir(cfg: DictConfig, job: config.Job) -> Path:
    from trinity.stages import experiment_name

    graph_file = config.require(config.profiled_file(cfg, job.model), "profile", job.model)
    shaping = {"graph": _file_digest(graph_file), "features": _file_digest(config.features_file(cfg, job.model)),
               "cluster": OmegaConf.to_container(cfg.clusters[job.cluster], resolve=True),
               "search": _resolved(config.search_config(cfg, job.method, job.seed)),
               # the same search for another experiment or results folder is another job (and MLflow run)
               "where": [experiment_name(cfg), str(cfg.paths.results)]}
    digest = hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return Path(cfg.paths.runs) / f"{job.model}-{job.cluster}-{job.method}-s{job.seed}-{digest}"


def _resolved(sc) -> dict:
    """A search's settings with its method's defaults filled in: a changed default is another search."""
    from trinity.rl.agent import agent_options

    return {**asdict(sc), "agent": asdict(agent_options(sc.method, sc.agent))}


def resume_run_id(cfg: DictConfig, job: config.Job) -> str | None:
    """The MLflow run of this search's checkpoint, so a resumed search logs into the same run."""
    if cfg.methods[job.method].kind != "search":
        return None
    from trinity.rl.search import checkpoint_run_id

    return checkpoint_run_id(run_dir(cfg, job))


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    graph = load_graph(config.require(config.profiled_file(cfg, job.model), "profile", job.model))
    cluster = config.cluster(cfg, job.cluster)
    out = config.search_dir(cfg, job)
    method = cfg.methods[job.method]
    if method.kind == "placer":
        metrics = _place(graph, cluster, method, job, out)
    elif method.kind == "local-search":
        metrics = _anneal(cfg, graph, cluster, method, job, out)
    else:
        metrics = _search(cfg, graph, cluster, job, out, tracker)
    tolerances = config.reward(cfg)  # what the reward held the job to (the paper's regime sets its own)
    metrics = {"model": job.model, "cluster": job.cluster, "method": job.method, "seed": job.seed,
               "devices": cluster.n_devices, **metrics, "comm_tolerance_GB": tolerances.comm_tolerance_GB,
               "memory_tolerance_GB": tolerances.memory_tolerance_GB, "cluster_config": cluster.to_dict()}
    write_json(out / "metrics.json", metrics)
    write_json(config.search_metrics_file(cfg, job), {k: v for k, v in metrics.items() if k != "cluster_config"})
    if metrics.get("infeasible"):
        print(f"{job.method} on {job.model}, {job.cluster}: not run ({metrics['infeasible']})")
        tracker.set_tags({"infeasible": metrics["infeasible"]})
        return
    tracker.log_metrics({"best/step_time_ms": metrics["step_time_ms"], "best/peak_comm_MB": metrics["peak_comm_MB"],
                         "best/peak_memory_GB": metrics["peak_memory_GB"], "best/fits": float(metrics["fits"]),
                         "search/seconds": metrics["search_seconds"]}, step=max(metrics["iterations"], 0))
    for name in ("strategy.json", "metrics.json", "history.csv", "search_curve.png"):
        if (out / name).exists():
            tracker.log_artifact(out / name)
    print(f"{job.method} on {job.model}, {job.cluster} (seed {job.seed}): {metrics['step_time_ms']:.3f} ms, "
          f"peak comm {metrics['peak_comm_MB']:.1f} MB, peak memory {metrics['peak_memory_GB']:.3f} GB"
          f"{'' if metrics['fits'] else ' (OOM)'} -> {out}")


def _place(graph, cluster, method, job, out: Path) -> dict:
    from trinity.errors import PlacementError
    from trinity.placers import place

    sim = Simulator(graph, cluster)
    try:
        placed = place(method.placer, graph, cluster, seed=job.seed, **OmegaConf.to_container(method.options))
    except PlacementError as exc:  # e.g. one device cannot hold the graph: the paper's "OOM"
        if exc.field == "max_candidates":  # the exact optimum on a graph too large to enumerate
            return {**{k: None for k in ("step_time_ms", "peak_comm_MB", "peak_memory_GB", "lower_bound_ms")},
                    "fits": False, "search_seconds": 0.0, "iterations": 0, "infeasible": exc.message}
        print(f"{method.placer} cannot place {graph.name} on {cluster.name} (OOM): {exc}")
        everything_on_one = np.zeros(graph.n_ops, np.int64)  # stands for the placement that did not fit
        res = sim.simulate(everything_on_one, check=False)
        Strategy.from_array(graph, cluster, everything_on_one, placer=method.placer, oom=True).save(
            out / "strategy.json")
        return _row(res, sim, fits=False, seconds=0.0)
    res = sim.simulate(placed.placement)
    Strategy.from_array(graph, cluster, placed.placement, placer=method.placer,
                        simulated_step_time_us=res.step_time_us).save(out / "strategy.json")
    return _row(res, sim, fits=res.fits, seconds=placed.seconds)


def _search(cfg, graph, cluster, job, out: Path, tracker) -> dict:
    import torch

    from trinity.plots import plot_search_curve
    from trinity.rl.search import Search

    sc = config.search_config(cfg, job.method, job.seed)
    feats = OpFeatures.load(config.require(config.features_file(cfg, job.model), "embed", job.model), graph)
    folder = run_dir(cfg, job)
    search = Search(graph, cluster, sc, folder, tracker=tracker, features=feats, progress=True)
    if search.iteration:
        print(f"resuming {folder} at iteration {search.iteration}")
    best = search.run()
    atomic_write_bytes(out / "strategy.json", (folder / "best_strategy.json").read_bytes())
    history = pd.DataFrame(search.history)
    atomic_write_bytes(out / "history.csv", history.to_csv(index=False).encode())
    plot_search_curve(history, out / "search_curve.png", title=f"{sc.method} on {graph.name}, {cluster.name}")
    res = search.simulator.simulate(best.placement, check=False)
    metrics = _row(res, search.simulator, fits=res.fits, seconds=search.seconds)
    search.close()
    metrics.update(iterations=search.iteration, best_iteration=best.iteration, reward=best.reward,
                   simulations=search.iteration * sc.batch, simulation_seconds=search.sim_seconds,
                   seconds_per_1000_iterations=1000 * search.seconds / max(search.iteration, 1),
                   warm_start=search.warm_start_placer, warm_start_agreement=search.warm_start_agreement,
                   # the same seed rounds, and so ends, otherwise under other CPU kernels (README)
                   float_kernels=torch.backends.cpu.get_cpu_capability())
    return metrics


def run_annealing(options: dict, graph, cluster, *, seed: int, reward_cfg, simulator: Simulator):
    """(start used, `AnnealResult`) of an annealing method with ``options``: from placer ``start``'s placement
    (default "best": the best warm-start placer by the reward, where the warm-started searches start)."""
    from trinity.placers import best_by_reward
    from trinity.placers.annealing import anneal, start_placement
    from trinity.reward import mdpe_reward
    from trinity.rl.warm_start import WARM_START_PLACERS

    opts = dict(options)
    start = opts.pop("start", "best")
    reward = lambda r: mdpe_reward(r, reward_cfg)  # noqa: E731
    if start == "best":
        start, initial = best_by_reward(WARM_START_PLACERS, graph, cluster, reward, seed=seed, simulator=simulator)
    else:
        start, initial = start_placement(start, graph, cluster, seed=seed)
    return start, anneal(graph, cluster, initial, seed=seed, reward=reward, simulator=simulator, **opts)


def _anneal(cfg, graph, cluster, method, job, out: Path) -> dict:
    """Simulated annealing from a placer's placement (`best`: the best by reward), same reward as Trinity."""
    sim = Simulator(graph, cluster)
    start, result = run_annealing(OmegaConf.to_container(method.options), graph, cluster, seed=job.seed,
                                  reward_cfg=config.reward(cfg), simulator=sim)
    res = sim.simulate(result.placement)
    Strategy.from_array(graph, cluster, result.placement, placer=f"annealing from {start}",
                        simulated_step_time_us=res.step_time_us).save(out / "strategy.json")
    history = pd.DataFrame(result.curve, columns=["charts/simulations", "charts/seconds", "step_time_us",
                                                  "charts/reward_max"])
    history["charts/best_step_time_ms"] = history.pop("step_time_us") / 1e3
    atomic_write_bytes(out / "history.csv", history.to_csv(index=False).encode())
    metrics = _row(res, sim, fits=res.fits, seconds=result.seconds)
    metrics.update(simulations=result.calls, reward=result.reward, warm_start=start, t_start=result.t_start,
                   t_end=result.t_end, accepted=result.accepted)
    return metrics


def _row(res, sim, *, fits: bool, seconds: float) -> dict:
    return {"step_time_ms": res.step_time_us / 1e3, "peak_comm_MB": res.peak_comm_bytes / 1e6,
            "peak_memory_GB": res.max_memory_bytes / 1e9, "fits": bool(fits), "search_seconds": seconds,
            "iterations": 0, "best_iteration": -1, "seconds_per_1000_iterations": None,
            "lower_bound_ms": sim.lower_bound_us / 1e3, "busiest_share": res.busiest_share}


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else ""
