"""Run a command (normally `dvc repro`) under one MLflow parent run; every stage job nests under it.

    python -m trinity.stages.tracked -- dvc repro

The parent takes the run's name and lists from params.yaml, and ends FINISHED, FAILED (the
command failed) or KILLED (interrupted), never RUNNING; params.yaml and dvc.lock go with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.stages.config import PARAMS_FILE
from trinity.track import PARENT_ENV, MLflowTracker, open_store


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    if not command:
        print("usage: python -m trinity.stages.tracked -- COMMAND ...", file=sys.stderr)
        return 2
    try:
        cfg = OmegaConf.load(PARAMS_FILE)
        uri = open_store(cfg.mlflow.uri)
    except TrinityError as exc:
        print(f"trinity: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError:
        print(f"trinity: error: {PARAMS_FILE}: missing; run `make params` first", file=sys.stderr)
        return 2
    tracker = MLflowTracker(cfg.mlflow.experiment or f"trinity-{cfg.run.name}", f"pipeline {cfg.run.name}",
                            uri=uri, tags={"trinity.stage": "pipeline", "trinity.run": str(cfg.run.name),
                                           "command": " ".join(command)})
    tracker.log_params({f"run.{k}": v for k, v in OmegaConf.to_container(cfg.run).items()})
    child = subprocess.Popen(command, env={**os.environ, PARENT_ENV: tracker.run_id})
    # Forward a stop to the command (and through it to the stage) and wait for it to wind down.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _: child.send_signal(s))
    code = child.wait()
    for path in (PARAMS_FILE, "dvc.lock"):
        if Path(path).exists():
            tracker.log_artifact(path)
    code = 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
    tracker.close("FINISHED" if code == 0 else "KILLED" if code in (130, 143) else "FAILED")
    return code


if __name__ == "__main__":
    sys.exit(main())
