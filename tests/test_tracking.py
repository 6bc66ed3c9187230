"""MLflow runs end FINISHED, FAILED or KILLED however their command ends; never RUNNING."""

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trinity.errors import TrinityError
from trinity.stages import config
from trinity.track import end_status, open_store

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("exc,status", [(None, "FINISHED"), (ValueError(), "FAILED"),
                                        (KeyboardInterrupt(), "KILLED"), (SystemExit(2), "KILLED")])
def test_end_status(exc, status):
    assert end_status(exc) == status


@pytest.mark.parametrize("command,code,status", [
    ([sys.executable, "-c", "pass"], 0, "FINISHED"),
    ([sys.executable, "-c", "raise SystemExit(3)"], 3, "FAILED"),
    ([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 143, "KILLED"),
])
def test_a_pipeline_run_is_one_parent_ending_as_its_command(tmp_path, command, code, status):
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    config.write_experiment(config.compose(["experiment=smoke"]), tmp_path)
    res = subprocess.run([sys.executable, "-m", "trinity.stages.tracked", "smoke", "--", *command], cwd=tmp_path)
    assert res.returncode == code
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("trinity-smoke").experiment_id])
    assert run.info.status == status and run.info.run_name == "pipeline smoke"
    assert run.data.params["run.models"] == "['tiny_cnn']"
    assert "params.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_a_server_that_is_down_is_one_error_naming_it():
    with pytest.raises(TrinityError, match=r"http://127\.0\.0\.1:9/ is not reachable.*unset MLFLOW_TRACKING_URI"):
        open_store("http://127.0.0.1:9/", timeout_s=2)
