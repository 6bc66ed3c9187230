"""A Hydra multirun under one MLflow parent run (conf/config.yaml registers the callback).

The parent opens before the launcher starts any job (creating a SQLite store once, as parallel
jobs racing to create it fail) and its id reaches every job through the environment, which
joblib's workers and SLURM jobs inherit. A sweep that fails part-way ends its parent FAILED; the
same sweep submitted again (same overrides) reopens that parent, so its resumed jobs (which log into
their own earlier runs) and its fresh ones stay under one parent. A SLURM sweep is checked first
(trinity.slurm.check_launcher): no tracking server, or a partition that does not exist, is one line
and exit status 2, before any job is submitted.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trinity.errors import TrinityError
from trinity.track import PARENT_ENV, MLflowTracker, open_store, tracking_uri


class MLflowParentRun(Callback):
    def __init__(self) -> None:
        self.tracker: MLflowTracker | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from trinity.slurm import check_launcher

        try:
            check_launcher(config.hydra.launcher, tracking_uri(config.mlflow.uri))
            uri = open_store(config.mlflow.uri)
        except TrinityError as exc:  # before any job starts: one line, not Hydra's traceback
            print(f"trinity multirun: error: {exc}", file=sys.stderr)
            sys.exit(2)
        self.tracker = self._open(config, uri)
        os.environ[PARENT_ENV] = self.tracker.run_id
        atexit.register(self._close, "FAILED")  # a no-op once on_multirun_end has closed it

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        self._close("FINISHED")

    def _open(self, config: DictConfig, uri: str) -> MLflowTracker:
        from mlflow.tracking import MlflowClient

        from trinity.stages import experiment_name

        overrides = " ".join(config.hydra.overrides.task)
        sweep = hashlib.sha256(f"{config.hydra.job.name} {overrides}".encode()).hexdigest()[:16]
        parent = os.environ.get(PARENT_ENV) or None
        experiment = MlflowClient(uri).get_experiment_by_name(experiment_name(config))
        unfinished = [] if experiment is None else MlflowClient(uri).search_runs(
            [experiment.experiment_id], filter_string=f"tags.`trinity.sweep` = '{sweep}' and "
                                                      "attributes.status != 'FINISHED'",
            order_by=["attributes.start_time DESC"], max_results=1)
        return MLflowTracker(experiment_name(config), f"multirun {config.hydra.job.name}", uri=uri,
                             run_id=unfinished[0].info.run_id if unfinished else None, parent_run_id=parent,
                             tags={"trinity.stage": "multirun", "trinity.run": str(config.run.name),
                                   "trinity.sweep": sweep, "overrides": overrides})

    def _close(self, status: str) -> None:
        if self.tracker is not None:
            self.tracker.close(status)
            self.tracker = None
