"""Step times of DDP, the parameter server, DASO and H-PS measured for real on a registered PyTorch model,
with the ranks made as fast as a `Cluster` of local processes says: what the families comparison checks
its data-parallel predictions against.

`cluster_train_config` turns the cluster into a `TrainConfig`: one rank per device, nodes of equal size
from the devices' ``node`` fields (consecutive devices), each rank slowed by fastest speed / its own (one
factor for every slowed rank), the link between nodes shaped by the kernel as the cluster describes it
(`trinity.runtime.links.cluster_network`; loopback inside a node), DASO in its cycling phase from the first step (the cost model's B = 4, S = 1; no blocking
warm-up or cool-down epochs). `measure_step` trains 2 epochs of ``steps`` steps on the model's example
batch: the first warms up, the second is timed on rank 0 (from the end of the first epoch's closing
metrics exchange, which every rank joins, to the end of the second's).
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

from trinity.cluster import Cluster
from trinity.data_parallel.config import DasoConfig, DataParallelError, TrainConfig


def slowdown_factors(cluster: Cluster) -> list[float]:
    """How much slower than the fastest each device is (fastest speed / its own): each local rank's throttle."""
    fastest = max(d.speed for d in cluster.devices)
    return [fastest / d.speed for d in cluster.devices]


def cluster_train_config(cluster: Cluster, model: str, batch: int, options: dict | None = None, *,
                         threads: int = 1) -> TrainConfig:
    """A `TrainConfig` whose ranks are ``cluster``'s devices (module docstring)."""
    from trinity.runtime.links import cluster_network
    sizes = [len(list(g)) for _, g in groupby(cluster.nodes)]
    if len(set(sizes)) != 1 or len(sizes) != len(set(cluster.nodes)):
        raise DataParallelError(f"needs nodes of equal size with consecutive devices, got {cluster.nodes}",
                                field="cluster.nodes")
    factors = slowdown_factors(cluster)
    slowed = sorted({round(f, 9) for f in factors if f > 1 + 1e-9})
    if len(slowed) > 1:
        raise DataParallelError(f"real runs slow every slowed rank by one factor; speeds give {slowed}",
                                field="cluster.devices")
    return TrainConfig(nproc=cluster.n_devices, procs_per_node=sizes[0],
                       slow_ranks=tuple(i for i, f in enumerate(factors) if f > 1 + 1e-9),
                       slowdown=slowed[0] if slowed else 1.0, epochs=2, global_batch=int(batch), lr=0.01,
                       model=model, model_options=dict(options or {}), link=cluster_network(cluster)[1],
                       daso=DasoConfig(warmup_epochs=0, cooldown_epochs=0), threads=threads).validate()


def measure_step(method: str, cluster: Cluster, model: str, batch: int, *, steps: int, out_dir: str | Path,
                 options: dict | None = None, timeout_s: float = 300.0, seed: int = 0, threads: int = 1) -> dict:
    """Train ``method`` for real on ``cluster``'s ranks; its measured step time, bytes and loss."""
    from trinity.data_parallel.train import train
    if not isinstance(steps, int) or steps < 1:
        raise DataParallelError(f"must be an integer >= 1, got {steps!r}", field="steps")
    cfg = cluster_train_config(cluster, model, batch, options, threads=threads)
    result = train(method, seed=seed, config=cfg, out_dir=Path(out_dir), timeout_s=timeout_s,
                   extra_args=["--max-steps", str(steps)])
    warm, timed = result["curve"]
    total_steps = cfg.epochs * steps
    return {"method": method, "model": model, "batch": batch, "steps": steps,
            "slowdown": [cfg.slowdown if r in cfg.slow_ranks else 1.0 for r in range(cfg.nproc)],
            "procs_per_node": cfg.procs_per_node,
            "step_time_us": (timed["time_s"] - warm["time_s"]) / steps * 1e6,
            "sent_bytes_per_step": result["sent_bytes"] / total_steps,
            "sent_bytes_per_rank_per_step": [b / total_steps for b in result["sent_bytes_per_rank"]],
            "compute_s_per_rank": result["compute_s_per_rank"], "shares": result["shares"],
            # forward and backward per step, both epochs (DDP's include the all-reduces its hooks start)
            "compute_us_per_step_per_rank": [c / total_steps * 1e6 for c in result["compute_s_per_rank"]],
            "loss": [warm["val_loss"], timed["val_loss"]]}
