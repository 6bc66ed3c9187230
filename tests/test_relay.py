"""Stage jobs log to MLflow through the pipeline's parent process (no MLflow import in the job)."""

import subprocess
import sys
import time

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from trinity import relay
from trinity.errors import TrinityError


@pytest.fixture
def served(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # created once, as open_store does
    server = relay.Relay(uri)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    yield MlflowClient(uri), server
    server.close()


def test_a_job_logs_through_the_relay_as_it_would_directly(served, tmp_path):
    client, _ = served
    assert relay.available()
    (tmp_path / "strategy.json").write_text("{}")
    tracker = relay.RelayTracker("trinity-test", "search/x", tags={"trinity.stage": "search"})
    tracker.log_params({"job.seed": 3})
    for step in range(3):
        tracker.log_metrics({"charts/best_step_time_ms": 10.0 - step}, step)
    tracker.log_artifact(tmp_path / "strategy.json")
    tracker.log_table(pd.DataFrame({"a": [1, 2]}), "table.json")
    tracker.close("FINISHED")
    run = client.get_run(tracker.run_id)
    assert (run.info.run_name, run.info.status, run.data.params) == ("search/x", "FINISHED", {"job.seed": "3"})
    assert run.data.tags["trinity.stage"] == "search"
    assert [m.value for m in client.get_metric_history(tracker.run_id, "charts/best_step_time_ms")] == [10, 9, 8]
    assert {a.path for a in client.list_artifacts(tracker.run_id)} == {"strategy.json", "table.json"}
    again = relay.RelayTracker("trinity-test", run_id=tracker.run_id)  # a resumed job: the same run, running again
    assert client.get_run(tracker.run_id).info.status == "RUNNING"
    again.close("KILLED")
    assert client.get_run(tracker.run_id).info.status == "KILLED"


def test_a_killed_job_leaves_its_run_killed_not_running(served):
    client, server = served
    job = subprocess.Popen([sys.executable, "-c", "from trinity.relay import RelayTracker; import sys, time; "
                            "print(RelayTracker('trinity-test', 'search/killed').run_id, flush=True); time.sleep(60)"],
                           stdout=subprocess.PIPE, text=True)
    run_id = job.stdout.readline().strip()
    job.kill()
    job.wait(timeout=30)
    deadline = time.time() + 30
    while client.get_run(run_id).info.status == "RUNNING" and time.time() < deadline:
        time.sleep(0.1)
    assert client.get_run(run_id).info.status == "KILLED"


def test_a_relay_that_is_gone_is_one_line(served, monkeypatch):
    _, server = served
    tracker = relay.RelayTracker("trinity-test", "search/y")
    server.close()
    tracker.conn.close()
    with pytest.raises(TrinityError, match="the pipeline's tracking relay is gone"):
        tracker.log_params({"a": 1})
    with pytest.raises(TrinityError, match="TRINITY_TRACKING_RELAY: the pipeline's tracking relay does not answer"):
        relay.RelayTracker("trinity-test", "search/z")


def test_a_stage_under_the_relay_never_imports_mlflow():
    code = ("import sys; import trinity.stages, trinity.stages.search, trinity.relay; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'torch', 'tensorflow')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "[]", res.stderr
