"""Run a command (normally `dvc repro`) in an experiment's folder under one MLflow parent run; every
stage job nests under it.

    python -m trinity.stages.tracked [EXPERIMENT] -- dvc repro

EXPERIMENT (default: ``default``) names the folder the command runs in (the checkout root for the
default experiment, ``experiments/<name>/`` for every other; `make params` writes it). The parent takes
the run's name and lists from that folder's params.yaml, and ends FINISHED, FAILED (the command failed)
or KILLED (interrupted), never RUNNING; params.yaml and dvc.lock go with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.relay import Relay
from trinity.stages.config import DEFAULT_EXPERIMENT, PARAMS_FILE, experiment_params
from trinity.track import PARENT_ENV, MLflowTracker, open_store

#: when the pipeline started (seconds since the epoch): the report states the wall time so far
STARTED_ENV = "TRINITY_PIPELINE_STARTED"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else 0
    names, command = argv[:split], argv[split + 1:] if "--" in argv else argv
    if not command or len(names) > 1:
        print("usage: python -m trinity.stages.tracked [EXPERIMENT] -- COMMAND ...", file=sys.stderr)
        return 2
    name = names[0] if names else DEFAULT_EXPERIMENT
    try:
        folder, cfg = experiment_params(name)
        uri = open_store(cfg.mlflow.uri)
    except TrinityError as exc:
        print(f"trinity: error: {exc}", file=sys.stderr)
        return 2
    tracker = MLflowTracker(cfg.mlflow.experiment or f"trinity-{cfg.run.name}", f"pipeline {cfg.run.name}",
                            uri=uri, tags={"trinity.stage": "pipeline", "trinity.run": str(cfg.run.name),
                                           "command": " ".join(command), "folder": str(folder)})
    tracker.log_params({f"run.{k}": v for k, v in OmegaConf.to_container(cfg.run).items()})
    jobs_relay = Relay(uri)  # the jobs log through this process: none of them imports MLflow
    env = {**os.environ, **jobs_relay.env, PARENT_ENV: tracker.run_id, STARTED_ENV: str(time.time())}
    try:
        child = subprocess.Popen(command, cwd=folder, env=env)
        # Forward a stop to the command (and through it to the stage) and wait for it to wind down.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda s, _: child.send_signal(s))
        code = child.wait()
    finally:
        jobs_relay.close()
    for path in (folder / PARAMS_FILE, folder / "dvc.lock"):
        if path.exists():
            tracker.log_artifact(path)
    code = 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
    tracker.close("FINISHED" if code == 0 else "KILLED" if code in (130, 143) else "FAILED")
    return code


if __name__ == "__main__":
    sys.exit(main())
