"""A Hydra multirun under one MLflow parent run (conf/config.yaml registers the callback).

The parent opens before the launcher starts any job (creating a SQLite store once, as parallel
jobs racing to create it fail) and its id reaches every job through the environment, which
joblib's workers and SLURM jobs inherit. A sweep that fails part-way ends its parent FAILED.
"""

from __future__ import annotations

import atexit
import os

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trinity.track import PARENT_ENV, MLflowTracker, open_store


class MLflowParentRun(Callback):
    def __init__(self) -> None:
        self.tracker: MLflowTracker | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from trinity.stages import experiment_name

        uri = open_store(config.mlflow.uri)
        overrides = " ".join(config.hydra.overrides.task)
        self.tracker = MLflowTracker(experiment_name(config), f"multirun {config.hydra.job.name}", uri=uri,
                                     parent_run_id=os.environ.get(PARENT_ENV) or None,
                                     tags={"trinity.stage": "multirun", "trinity.run": str(config.run.name),
                                           "overrides": overrides})
        os.environ[PARENT_ENV] = self.tracker.run_id
        atexit.register(self._close, "FAILED")  # a no-op once on_multirun_end has closed it

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        self._close("FINISHED")

    def _close(self, status: str) -> None:
        if self.tracker is not None:
            self.tracker.close(status)
            self.tracker = None
