"""The pipeline's stages, as library code: export -> profile -> embed -> search -> validate -> report.

`pipeline/<stage>.py` is a thin Hydra entry point that calls `main(stage, cfg)`.
Each stage module has ``run(cfg, job, tracker)`` (and may have
``resume_run_id(cfg, job)``, the MLflow run an interrupted job logged to).
`main` gives every job one MLflow run, nested under the pipeline's or the
multirun's parent run, with the job's config as params, and ends it FINISHED,
FAILED or KILLED however the job ends; user errors are one line, exit 2.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys

from omegaconf import DictConfig

from trinity import relay
from trinity.errors import TrinityError
from trinity.stages import config
from trinity.track import PARENT_ENV, MLflowTracker, end_status, open_store

STAGES = ("export", "profile", "embed", "search", "validate", "train", "layers", "whole_step", "partition", "measure",
          "families", "report")


def experiment_name(cfg: DictConfig) -> str:
    return cfg.mlflow.experiment or f"trinity-{cfg.run.name}"


def run_name(stage: str, job: config.Job) -> str:
    if stage == "search":
        return f"search/{job.case}"
    if stage == "train":
        return f"train/{job.method}-s{job.seed}"
    if stage == "partition":
        return f"partition/{job.case}"
    if stage == "measure":
        return f"measure/{job.model}-{job.cluster}-{job.method}"
    return stage if stage == "report" else f"{stage}/{job.model}"


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt  # DVC, a launcher or `kill` stops a job: end its run as KILLED


def _one_line_hydra_errors() -> None:
    """Make an override Hydra cannot apply (a misspelt key, an option that does not exist, bad syntax)
    one line naming it, exit 2, like every other bad input, instead of Hydra's error block.

    Every stage script imports this package before its ``@hydra.main`` runs, so this is installed
    there without touching the scripts (DVC hashes them: an edit would rerun every stage). Hydra
    raises its errors when HYDRA_FULL_ERROR is set; they reach this hook uncaught."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    previous = sys.excepthook

    def hook(kind, exc, tb):
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if not isinstance(exc, (HydraException, OmegaConfBaseException, TrinityError)):
            return previous(kind, exc, tb)
        if not isinstance(exc, TrinityError):  # main() has already printed a TrinityError's line
            script = os.path.splitext(os.path.basename(sys.argv[0]))[0]
            print(f"trinity {script}: error: {config.hydra_error_line(exc)}", file=sys.stderr, flush=True)
        atexit._run_exitfuncs()  # a multirun's parent run ends FAILED, as on any other exit
        os._exit(2)

    sys.excepthook = hook


if os.path.basename(sys.argv[0]) in {f"{stage}.py" for stage in STAGES}:  # a stage script (pipeline/)
    _one_line_hydra_errors()
    # Registered before the job's own exit handlers (MLflow's), so it runs after them: the interpreter's
    # teardown then leaves the heap (mostly modules) to the process's end instead of collecting it, 1-2 s a job.
    atexit.register(gc.freeze)


def main(stage: str, cfg: DictConfig) -> None:
    """Run one job of ``stage``; exit 2 with one line on bad input (raise instead inside a multirun)."""
    from hydra.core.hydra_config import HydraConfig

    multirun = HydraConfig.initialized() and str(HydraConfig.get().mode) == "RunMode.MULTIRUN"
    if HydraConfig.initialized() and HydraConfig.get().job.config_name == "config":
        config.rebase_paths(cfg)  # composed from conf/ by hand (not DVC's params.yaml): the experiment's folder
    try:
        run_job(stage, cfg)
    except TrinityError as exc:
        print(f"trinity {stage}: error: {exc}", file=sys.stderr)
        if multirun:
            raise
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"trinity {stage}: interrupted", file=sys.stderr)
        sys.exit(130)


def run_job(stage: str, cfg: DictConfig) -> None:
    module = importlib.import_module(f"trinity.stages.{stage}")
    job = config.job(cfg)
    resume = getattr(module, "resume_run_id", None)
    run = dict(run_id=resume(cfg, job) if resume else None, parent_run_id=os.environ.get(PARENT_ENV) or None,
               tags={"trinity.stage": stage, "trinity.run": str(cfg.run.name)})
    if relay.available():  # under `make repro`: its parent process logs (no MLflow import here)
        tracker = relay.RelayTracker(experiment_name(cfg), run_name(stage, job), **run)
    else:
        tracker = MLflowTracker(experiment_name(cfg), run_name(stage, job), uri=open_store(cfg.mlflow.uri), **run)
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    error: BaseException | None = None
    try:
        tracker.log_params(config.flat_params(cfg, job, stage))
        module.run(cfg, job, tracker)
    except BaseException as exc:
        error = exc
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        tracker.close(end_status(error))
