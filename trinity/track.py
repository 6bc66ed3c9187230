"""Experiment tracking: a thin layer over MLflow with a do-nothing twin.

Defaults follow DESIGN.md: a local SQLite store (``sqlite:///mlflow.db`` in
the working directory). Metrics are buffered and sent in batches, because one
SQLite write per metric per iteration would cost more than the search step.
"""

from __future__ import annotations

import os
import time
from typing import Any

DEFAULT_URI = "sqlite:///mlflow.db"


class NullTracker:
    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: str | os.PathLike) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, status: str = "FINISHED") -> None:
        pass


class MLflowTracker(NullTracker):
    """One MLflow run; ``run_id`` resumes an earlier run (a restarted search logs into the same run)."""

    def __init__(self, experiment: str = "trinity", run_name: str | None = None, *, uri: str | None = None,
                 run_id: str | None = None, parent_run_id: str | None = None, flush_every: int = 25):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI)
        if run_id is None:
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
            tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
            run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        self.run_id = run_id
        self.flush_every = flush_every
        self._buffer: list = []

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(self.run_id).data.params
        fresh = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        if fresh:
            self.client.log_batch(self.run_id, params=fresh)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer += [Metric(k, float(v), now, step) for k, v in metrics.items()]
        if len(self._buffer) >= self.flush_every * max(1, len(metrics)):
            self.flush()

    def flush(self) -> None:
        for i in range(0, len(self._buffer), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=self._buffer[i:i + 1000])
        self._buffer = []

    def log_artifact(self, path: str | os.PathLike) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self, status: str = "FINISHED") -> None:
        self.flush()
        self.client.set_terminated(self.run_id, status)
