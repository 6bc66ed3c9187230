"""MLflow through the pipeline's parent process, so that a stage job never imports MLflow.

Importing MLflow and opening its SQLite store costs a process about 2.5 s, more than most smoke jobs
take. `make repro`'s parent process (`trinity.stages.tracked`) has MLflow loaded already; it serves
a `Relay` on a local socket, and each stage job's `RelayTracker` sends it the same calls an
`MLflowTracker` takes (open a run, params, metrics, artifacts, close), which the parent makes with
its own client. Run ids are MLflow's own, so a resumed search reopens its run as before. A job whose
connection drops without closing its run (killed) has the run ended KILLED; a parent that is gone
is a one-line error in the job, not a hang.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from trinity.errors import TrinityError
from trinity.track import NullTracker

#: the relay's address and key (hex) while a pipeline runs; its jobs inherit them
ADDRESS_ENV, KEY_ENV = "TRINITY_TRACKING_RELAY", "TRINITY_TRACKING_RELAY_KEY"
TIMEOUT_S = 120.0  # one call (a large artifact into a slow store) never takes this long


class Relay:
    """Serves `RelayTracker` calls with real `MLflowTracker` runs, one thread per connected job."""

    def __init__(self, uri: str):
        self.uri, self.closed = uri, False
        self.key = secrets.token_bytes(16)
        self.address = os.path.join(tempfile.gettempdir(), f"trinity-relay-{os.getpid()}-{secrets.token_hex(4)}.sock")
        self.listener = Listener(self.address, family="AF_UNIX", authkey=self.key)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def env(self) -> dict[str, str]:
        return {ADDRESS_ENV: self.address, KEY_ENV: self.key.hex()}

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except Exception:  # noqa: BLE001 (closed, or a caller without the key)
                if self.closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        from trinity.track import MLflowTracker

        tracker = None
        try:
            while True:
                method, args, kwargs = conn.recv()
                try:
                    if method == "open":
                        tracker = MLflowTracker(*args, uri=self.uri, **kwargs)
                        result = tracker.run_id
                    else:
                        result = getattr(tracker, method)(*args, **kwargs)
                        if method == "close":
                            tracker = None
                    conn.send(("ok", result))
                except Exception as exc:  # noqa: BLE001 (sent back: the job raises it)
                    conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except (EOFError, OSError):  # the job is gone
            if tracker is not None:
                tracker.close("KILLED")
        finally:
            conn.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        Path(self.address).unlink(missing_ok=True)


def available() -> bool:
    """Whether this process runs under a pipeline's relay."""
    return bool(os.environ.get(ADDRESS_ENV))


class RelayTracker(NullTracker):
    """`MLflowTracker`'s calls, made by the pipeline's parent process (same arguments, same run ids)."""

    def __init__(self, experiment: str, run_name: str | None = None, *, run_id: str | None = None,
                 parent_run_id: str | None = None, tags: dict[str, str] | None = None):
        address = os.environ[ADDRESS_ENV]
        try:
            self.conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(os.environ[KEY_ENV]))
        except (OSError, EOFError, ValueError) as exc:
            raise TrinityError(f"the pipeline's tracking relay does not answer ({exc}); run the stage under "
                               f"`make repro`, or unset {ADDRESS_ENV}", field=ADDRESS_ENV) from None
        self.run_id = self._call("open", experiment, run_name, run_id=run_id, parent_run_id=parent_run_id, tags=tags)

    def _call(self, method: str, *args, **kwargs) -> Any:
        try:
            self.conn.send((method, args, kwargs))
            if not self.conn.poll(TIMEOUT_S):
                raise TimeoutError(f"no answer in {TIMEOUT_S:.0f} s")
            status, result = self.conn.recv()
        except (OSError, EOFError, TimeoutError) as exc:
            raise TrinityError(f"the pipeline's tracking relay is gone ({exc or type(exc).__name__})",
                               field=ADDRESS_ENV) from None
        if status == "error":
            raise RuntimeError(f"MLflow (through the pipeline's relay): {result}")
        return result

    def log_params(self, params: dict[str, Any]) -> None:
        self._call("log_params", params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._call("log_metrics", {k: float(v) for k, v in metrics.items()}, step)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._call("log_artifact", os.path.abspath(path), artifact_path)  # the parent runs elsewhere

    def log_table(self, table, artifact_file: str) -> None:
        self._call("log_table", table, artifact_file)

    def set_tags(self, tags: dict[str, str]) -> None:
        self._call("set_tags", tags)

    def flush(self) -> None:
        self._call("flush")

    def close(self, status: str = "FINISHED") -> None:
        self._call("close", status)
        self.conn.close()
