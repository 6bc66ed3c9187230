"""Stage `train`: one data-parallel method (`methods.<m>.kind: data-parallel`) and seed, trained for real.

The run (trinity.data_parallel.train) checkpoints every epoch into ``runs/train-<method>-s<seed>-<digest>/``,
outside DVC's outputs, so a killed run resumes on the next `dvc repro`; the digest covers the training
config, so a changed setting starts afresh. A finished run's checkpoint is deleted once its outputs are
written: a rerun (its code changed) trains afresh rather than resuming the finished run. Out: ``results/train/<method>-s<seed>/`` (result.json, the
loss curve as curve.csv) and ``<method>-s<seed>.metrics.json`` beside it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from trinity.errors import TrinityError
from trinity.fileio import atomic_write_bytes, write_json
from trinity.machine import MachineWatch
from trinity.stages import config

#: what metrics.json keeps of a run's result (the curve and per-rank lists stay in result.json)
SUMMARY = ("method", "seed", "data", "time_to_target_s", "target_val_loss", "train_time_s", "final_val_loss",
           "final_val_acc", "sent_bytes", "resumed_from_epoch", "load_before", "load_after",
           "other_cpu", "steal")


def run_dir(cfg: DictConfig, job: config.Job) -> Path:
    shaping = json.dumps(config.train_config(cfg).to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha256(shaping.encode()).hexdigest()[:10]
    return Path(cfg.paths.runs) / f"train-{job.method}-s{job.seed}-{digest}"


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.data_parallel import train
    from trinity.data_parallel.train import CHECKPOINT

    method = cfg.methods[job.method]
    if method.kind != "data-parallel":
        raise TrinityError(f"method {job.method!r} is not a data-parallel method (kind {method.kind})",
                           field=f"methods.{job.method}.kind")
    train_cfg = config.train_config(cfg)
    folder = run_dir(cfg, job)
    resume = (folder / CHECKPOINT).exists()
    if resume:
        print(f"resuming {folder} from its checkpoint")
    watch = MachineWatch()  # ranks are pinned to cores, but other jobs may share them: recorded
    result = train(str(method.method), seed=job.seed, config=train_cfg, out_dir=folder,
                   timeout_s=float(cfg.data_parallel.timeout_s), resume=resume)
    result.update(watch.metrics())
    out = config.train_dir(cfg, job)
    curve = pd.DataFrame(result["curve"])
    atomic_write_bytes(out / "curve.csv", curve.to_csv(index=False).encode())
    write_json(out / "result.json", {**result, "config": train_cfg.to_dict()})
    summary = {k: result.get(k) for k in SUMMARY}
    summary["reached_target"] = result["time_to_target_s"] is not None
    write_json(config.metrics_beside(out), summary)
    for _, point in curve.iterrows():
        tracker.log_metrics({"charts/val_loss": point["val_loss"], "charts/val_acc": point["val_acc"],
                             "charts/train_loss": point["train_loss"], "charts/seconds": point["time_s"]},
                            step=int(point["epoch"]))
    tracker.log_metrics({k: float(v) for k, v in summary.items() if isinstance(v, (int, float))
                         and not isinstance(v, bool) and k != "seed"}, step=len(curve))
    tracker.log_artifact(out / "result.json")
    (folder / CHECKPOINT).unlink(missing_ok=True)  # finished: its outputs hold the run now
    target = result["time_to_target_s"]
    print(f"{job.method} seed {job.seed}: validation loss {cfg.data_parallel.train.target_val_loss} "
          f"{'after %.2f s' % target if target is not None else 'never reached'}, accuracy "
          f"{result['final_val_acc']:.3f}, {result['sent_bytes'] / 1e6:.0f} MB sent -> {out}")
