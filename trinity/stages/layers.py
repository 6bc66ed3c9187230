"""Stage `layers`: a PyTorch model's layers timed for real, one by one (pipeline parallelism's input).

Out: ``data/<model>/layers/profile.json`` (trinity.profile.layers.LayerProfile).
"""

from __future__ import annotations

import time

from omegaconf import DictConfig, OmegaConf

from trinity.machine import MachineWatch
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.profile.layers import profile_layers

    spec, p = cfg.models[job.model], cfg.pipeline_parallel.layers
    watch, t0 = MachineWatch(), time.perf_counter()  # a timing: what else the machine did is recorded
    profile = profile_layers(spec.name, spec.batch, steps=int(p.steps), warmup=int(p.warmup), threads=int(p.threads),
                             **OmegaConf.to_container(spec.options))
    out = config.layers_file(cfg, job.model)
    profile.save(out)
    work_ms = sum(layer.forward_us + layer.backward_us for layer in profile.layers) / 1e3
    tracker.log_metrics({"layers/count": profile.n_layers, "layers/step_compute_ms": work_ms,
                         "layers/seconds": time.perf_counter() - t0,
                         **{f"layers/{k}": v for k, v in watch.metrics().items()}}, step=0)
    print(f"layers {job.model}: {profile.n_layers} layers, {work_ms:.1f} ms of forward + backward at batch "
          f"{profile.batch} -> {out}")
