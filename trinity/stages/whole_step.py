"""Stage `whole_step`: a PyTorch model's whole training step timed on its own at several sample counts
(data parallelism's computation term, `trinity.profile.whole_step`).

Out: ``data/<model>/whole_step/profile.json`` (trinity.profile.whole_step.WholeStepProfile).
"""

from __future__ import annotations

import time

from omegaconf import DictConfig, OmegaConf

from trinity.machine import MachineWatch
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.profile.whole_step import profile_whole_step

    spec, p = cfg.models[job.model], cfg.pipeline_parallel.whole_step
    watch, t0 = MachineWatch(), time.perf_counter()  # a timing: what else the machine did is recorded
    profile = profile_whole_step(spec.name, spec.batch, steps=int(p.steps), warmup=int(p.warmup),
                                 threads=int(p.threads), **OmegaConf.to_container(spec.options))
    out = config.whole_step_file(cfg, job.model)
    profile.save(out)
    tracker.log_metrics({"whole_step/batch_ms": profile.step_us[-1] / 1e3,
                         "whole_step/seconds": time.perf_counter() - t0,
                         **{f"whole_step/{k}": v for k, v in watch.metrics().items()}}, step=0)
    times = ", ".join(f"{s}: {t / 1e3:.1f}" for s, t in zip(profile.samples, profile.step_us))
    print(f"whole_step {job.model}: ms per step by samples {{{times}}} -> {out}")
