"""notebooks/analysis.ipynb runs on a fresh MLflow store and rebuilds the comparison from the search runs."""

from pathlib import Path

import nbformat
import pytest
from mlflow.tracking import MlflowClient
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"

#: (model, cluster, method, seed, best step time in ms) of the finished search runs
SEARCH_JOBS = [("inception_v3", "p100x2", "hierarchical", 0, 10.0), ("inception_v3", "p100x2", "hierarchical", 1, 12.0),
               ("inception_v3", "p100x2", "trinity", 0, 9.0), ("inception_v3", "p100x2", "trinity", 1, 9.5),
               ("inception_v3", "p100x2", "m-etf", 0, 13.5), ("inception_v3", "p100x4", "trinity", 0, 7.0)]


def child_run(client, experiment, parent, stage, params, metrics, finished=True, start_time=None):
    tags = {"trinity.stage": stage, "mlflow.parentRunId": parent}
    run = client.create_run(experiment, start_time=start_time, tags=tags).info.run_id
    for key, value in params.items():
        client.log_param(run, key, value)
    for key, value in metrics.items():
        client.log_metric(run, key, value)
    if finished:
        client.set_terminated(run)


def fill_store(uri: str, experiment_name: str, artifacts: Path) -> None:
    """A pipeline parent run with the search stage's children, an earlier run of one job, one unfinished search
    and a validate run."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment(experiment_name, artifact_location=artifacts.as_uri())
    parent = client.create_run(experiment, run_name="pipeline test", tags={"trinity.stage": "pipeline"}).info.run_id
    job = {"job.model": "inception_v3", "job.cluster": "p100x2", "job.method": "hierarchical", "job.seed": 0}
    child_run(client, experiment, parent, "search", job, {"best/step_time_ms": 500.0},  # run again later: left out
              start_time=1_000)
    for model, cluster, method, seed, step in SEARCH_JOBS:
        child_run(client, experiment, parent, "search",
                  {"job.model": model, "job.cluster": cluster, "job.method": method, "job.seed": seed},
                  {"best/step_time_ms": step, "best/peak_comm_MB": 1.0, "best/peak_memory_GB": 0.5})
    child_run(client, experiment, parent, "search",  # still running: no result yet, left out
              {"job.model": "inception_v3", "job.cluster": "p100x2", "job.method": "trinity", "job.seed": 2},
              {"best/step_time_ms": 1000.0}, finished=False)
    child_run(client, experiment, parent, "validate", {"job.model": "inception_v3"},
              {"best/step_time_ms": 2000.0})  # another stage's run, left out
    client.set_terminated(parent)


def printed_table(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """The notebook's printed pivot (header 'method ...', then 'model cluster value ...') as a dict."""
    lines = text.splitlines()
    methods = next(line for line in lines if line.startswith("method")).split()[1:]
    table = {}
    for line in lines:
        fields = line.split()
        if len(fields) == 2 + len(methods) and fields[0] == "inception_v3":
            table[(fields[0], fields[1])] = {m: float(v) for m, v in zip(methods, fields[2:])}
    return table


def test_notebook_rebuilds_the_comparison(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    fill_store(uri, "trinity-test", tmp_path / "artifacts")
    figure = tmp_path / "figures" / "comparison.png"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("TRINITY_EXPERIMENT", "trinity-test")
    monkeypatch.setenv("TRINITY_NOTEBOOK_OUT", str(figure))

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells), "commit the notebook with its outputs cleared"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "6 finished search jobs; earlier re-runs left out: 1" in printed
    table = printed_table(printed)
    assert table[("inception_v3", "p100x2")] == {"hierarchical": 11.0, "m-etf": 13.5, "trinity": 9.25}
    assert table[("inception_v3", "p100x4")]["trinity"] == 7.0
    assert figure.stat().st_size > 0 and figure.read_bytes()[:4] == b"\x89PNG"


def test_notebook_is_valid_nbformat_4():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4 and nb.metadata.kernelspec.name == "python3"



def test_notebook_finds_the_projects_store_from_notebooks(tmp_path, monkeypatch):
    """Run from notebooks/ with no MLFLOW_TRACKING_URI: the project's store at the checkout root, not a new
    empty one beside the notebook."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "notebooks").mkdir()
    fill_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "trinity-default", tmp_path / "artifacts")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("TRINITY_EXPERIMENT", raising=False)
    monkeypatch.delenv("TRINITY_NOTEBOOK_OUT", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path / "notebooks")}}).execute()
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert f"runs in 'trinity-default' at sqlite:///{tmp_path.resolve() / 'mlflow.db'}" in printed
    assert (tmp_path / "reports" / "figures" / "notebook_comparison.png").exists()
    assert not (tmp_path / "notebooks" / "mlflow.db").exists()


def test_notebook_refuses_a_store_that_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'nowhere.db'}")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.raises(Exception, match="no MLflow store at sqlite:///.*nowhere.db: run `make repro`"):
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not (tmp_path / "nowhere.db").exists()
