"""Experiment tracking: a thin layer over MLflow with a do-nothing twin.

Defaults follow DESIGN.md: a local SQLite store (``sqlite:///mlflow.db`` in
the working directory). Metrics are buffered and sent in batches, because one
SQLite write per metric per iteration would cost more than the search step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

DEFAULT_URI = "sqlite:///mlflow.db"  # in the project's root folder (see default_uri)
#: a pipeline run or a Hydra multirun puts its parent run's id here; each job's run nests under it
PARENT_ENV = "TRINITY_PARENT_RUN_ID"


def project_root(start: str | os.PathLike | None = None) -> Path:
    """The DVC project around ``start`` (default: the working directory): the nearest folder up that holds
    ``.dvc/``; ``start`` itself outside any project."""
    start = Path(start or os.getcwd()).resolve()
    return next((d for d in (start, *start.parents) if (d / ".dvc").is_dir()), start)


def default_uri(start: str | os.PathLike | None = None) -> str:
    """The project's one local store, ``<project root>/mlflow.db``: the same store whichever folder a
    stage (an experiment's, under experiments/), the notebook (notebooks/) or a user runs from."""
    return f"sqlite:///{project_root(start) / 'mlflow.db'}"


def tracking_uri(uri: str | None = None) -> str:
    """``uri``, else $MLFLOW_TRACKING_URI, else the project's local SQLite store."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()


def open_store(uri: str | None = None, timeout_s: float = 5.0) -> str:
    """Check the store answers before any work starts: a server that is down is one clear line,
    not minutes of retries; a SQLite store is created here, once (parallel jobs racing to create
    it fail)."""
    from trinity.errors import TrinityError

    uri = tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s).read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrinityError(f"MLflow tracking server {uri} is not reachable ({reason}); start it, or unset "
                               f"MLFLOW_TRACKING_URI to log to {default_uri()}", field="MLFLOW_TRACKING_URI") from None
    else:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    return uri


def end_status(exc: BaseException | None) -> str:
    """MLflow's status for a run that ended with ``exc`` (None: it finished)."""
    if exc is None:
        return "FINISHED"
    return "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"


class NullTracker:
    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        pass

    def log_table(self, table, artifact_file: str) -> None:
        pass

    def set_tags(self, tags: dict[str, str]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, status: str = "FINISHED") -> None:
        pass


class MLflowTracker(NullTracker):
    """One MLflow run; ``run_id`` resumes an earlier run (a restarted search logs into the same run)."""

    def __init__(self, experiment: str = "trinity", run_name: str | None = None, *, uri: str | None = None,
                 run_id: str | None = None, parent_run_id: str | None = None, tags: dict[str, str] | None = None,
                 flush_every: int = 25):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri(uri))
        tags = {**(tags or {}), **({"mlflow.parentRunId": parent_run_id} if parent_run_id else {})}
        if run_id is None:
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
            run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        else:  # a resumed run is running again
            self.client.update_run(run_id, status="RUNNING")
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

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_table(self, table, artifact_file: str) -> None:
        """A pandas table as an MLflow table artifact (shown in the UI's artifact view)."""
        self.client.log_table(self.run_id, data=table, artifact_file=artifact_file)

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v)[:5000])

    def close(self, status: str = "FINISHED") -> None:
        self.flush()
        self.client.set_terminated(self.run_id, status)


class TrackingServer:
    """`mlflow server` on this machine: a SQLite backend and an artifact root on disk under ``folder``, on a
    free local port; stopped (with every process it started) when the block ends.

        with TrackingServer("tracking") as server:   # server.uri: http://127.0.0.1:PORT
            ...
    """

    def __init__(self, folder: str | os.PathLike, host: str = "127.0.0.1", port: int | None = None,
                 start_timeout_s: float = 120):
        from pathlib import Path

        self.folder = Path(folder)
        self.host, self.port = host, port
        self.start_timeout_s = start_timeout_s
        self.proc = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> TrackingServer:
        import socket
        import subprocess
        import sys

        from trinity.errors import TrinityError

        self.folder.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            with socket.socket() as s:
                s.bind((self.host, 0))
                self.port = s.getsockname()[1]
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", self.host, "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{(self.folder / 'mlflow.db').resolve()}",
             "--artifacts-destination", str((self.folder / "artifacts").resolve()), "--workers", "1"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                open_store(self.uri, timeout_s=1)
                return self
            except TrinityError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise TrinityError(f"mlflow server did not start (see {self.folder / 'server.log'})") from None
                time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        import signal
        import subprocess

        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the server's whole session: gunicorn/uvicorn workers too
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=20)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a worker the server left behind
        except ProcessLookupError:
            pass
        self.proc = None
