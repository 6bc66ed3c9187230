"""The smoke experiment end to end, as a user runs it: `dvc repro` over every stage in a fresh project
folder, then what DVC, Hydra and MLflow must show afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1",
       "DVC_NO_ANALYTICS": "1"}  # no network here
ENV.pop("MLFLOW_TRACKING_URI", None)
ENV.pop("TRINITY_PARENT_RUN_ID", None)


def sh(*cmd, cwd, env=None, timeout=900, check=True) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or ENV, capture_output=True, text=True,
                         timeout=timeout)
    if check and res.returncode:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout[-3000:]}\n"
                             f"{res.stderr[-3000:]}")
    return res


#: what a clone holds of the default experiment: a smoke run must leave every byte of it as it was
DEFAULT_EXPERIMENT_FILES = ("params.yaml", "dvc.lock", "results", "reports")


def make_project(folder: Path) -> Path:
    """A fresh copy of what a clone holds for the pipeline: code, conf/ and the default experiment's committed
    params, lock and results (no data/, no mlflow.db)."""
    for name in ("conf", "pipeline", "trinity", "notebooks", "results", "reports"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml", "dvc.lock"):
        shutil.copy(ROOT / name, folder / name)
    sh(BIN / "dvc", "init", "--no-scm", "-q", cwd=folder)
    sh(BIN / "dvc", "config", "hydra.enabled", "true", cwd=folder)
    return folder


def tree_digest(project: Path) -> dict[str, str]:
    """Every file of the project outside experiments/, DVC's own folder and the MLflow store, by content."""
    return {str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(project.rglob("*"))
            if p.is_file() and p.relative_to(project).parts[0] not in ("experiments", ".dvc", "mlflow.db", "mlruns")
            and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def smoke_project(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The smoke experiment reproduced once, as `make repro EXPERIMENT=smoke` runs it, under one MLflow
    parent run; with the project's files as they were before it."""
    project = make_project(tmp_path_factory.mktemp("project"))
    before = tree_digest(project)
    sh(sys.executable, "-m", "trinity.stages.params", "experiment=smoke", cwd=project)
    sh(sys.executable, "-m", "trinity.stages.tracked", "smoke", "--", BIN / "dvc", "repro", cwd=project,
       timeout=1500)
    return project, before


@pytest.fixture(scope="module")
def smoke(smoke_project) -> Path:
    """The smoke experiment's folder (experiments/smoke/: params.yaml, dvc.yaml, dvc.lock, outputs)."""
    return smoke_project[0] / "experiments" / "smoke"


def runs(smoke: Path, experiment: str = "trinity-smoke"):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{smoke.parents[1] / 'mlflow.db'}")  # the project's one store
    return mlflow.search_runs(experiment_names=[experiment])


def test_a_smoke_run_leaves_the_default_experiment_byte_for_byte(smoke_project):
    project, before = smoke_project
    assert {p: d for p, d in tree_digest(project).items() if before.get(p) != d} == {}
    assert set(before) == set(tree_digest(project))
    assert any(p.startswith("results/search/inception_v3/") for p in before)  # the default's results were there
    assert (project / "mlflow.db").exists() and not list(project.glob("multirun*"))


def test_the_smoke_report_shows_only_its_own_run_and_says_what_ran(smoke):
    report = (smoke / "reports" / "REPORT.md").read_text()
    assert report.startswith("# Trinity: report\n\n**Experiment `smoke`** (conf/experiment/smoke.yaml), commit ")
    assert "wall time: " in report and "| trinity | 4 iterations x 4 samples |" in report
    assert "inception_v3" not in report
    assert set(pd.read_csv(smoke / "reports" / "families.csv")["model"]) == {"transformer_lm"}


def test_finished_trainings_leave_no_checkpoint_to_resume(smoke):
    folders = sorted((smoke / "runs").glob("train-*"))  # a rerun with changed code must train afresh
    assert len(folders) == 2 and not [f for f in folders if (f / "checkpoint.pt").exists()]


def test_smoke_leaves_every_report(smoke):
    reports = smoke / "reports"
    for name in ("table3.csv", "table3.md", "table4.csv", "table4.md", "table5.csv", "table5.md", "REPORT.md",
                 "metrics.json"):
        assert (reports / name).stat().st_size > 0, name
    assert list((reports / "figures").glob("*.png"))
    strategies = list((smoke / "results" / "search" / "tiny_cnn").glob("p100x2-*-s0/strategy.json"))
    assert len(strategies) == 10  # every method but the exact optimum, infeasible on this graph:
    optimum = (smoke / "results" / "search" / "tiny_cnn" / "p100x2-optimum-s0.metrics.json").read_text()
    assert "79 units on 2 devices" in optimum and "infeasible" in optimum
    validated = smoke / "results" / "validate" / "tiny_cnn"
    assert (validated / "results.csv").exists() and (validated / "batch4" / "results.csv").exists()
    summary = json.loads((smoke / "results" / "validate" / "tiny_cnn.summary.json").read_text())
    assert set(summary["batches"]) == {"8", "4"} and summary["batches"]["4"]["strategies"] > 0
    # the paper's regime: its own results folder, both rewards side by side, the Pareto figure
    regime = smoke / "results" / "regime" / "search" / "layered12"
    assert {p.name for p in regime.glob("*.metrics.json")} == {
        f"p100x2-{m}-s0.metrics.json" for m in ("single", "m-etf", "trinity-warm", "trinity-runtime")}
    assert json.loads((regime / "p100x2-trinity-warm-s0.metrics.json").read_text())["memory_tolerance_GB"] == 0.002
    tradeoff = pd.read_csv(reports / "reward_tradeoff.csv")
    assert list(tradeoff["entry"])[1:] == ["Trinity (MDPE reward)", "Trinity (runtime-only reward)"]
    assert (reports / "figures" / "pareto_layered12_p100x2.png").exists()
    plans = (reports / "pipeline_parallel.csv").read_text()
    assert all(f"transformer_lm,local4h,{m},0," in plans for m in ("tapp", "pipedream", "dp")), plans
    families = (reports / "families.csv").read_text()
    assert {"op placement", "pipeline", "data parallel"} <= {line.split(",")[2] for line in families.splitlines()[1:]}
    side = pd.read_csv(reports / "families.csv")
    real = side[side["real_step_ms"].notna()]  # every pipeline and data-parallel entry, run for real on local4h
    measured = set(real["method"])
    assert measured - {"pipedream"} == {"tapp", "ddp", "hps"}, side
    if "pipedream" not in measured:  # its plan follows the measured layer times: uneven replicas cannot run
        doc = json.loads((smoke / "results" / "measure" / "transformer_lm" / "local4h-pipedream.metrics.json")
                         .read_text())
        assert doc["real_step_ms"] is None
        assert doc["not_run"].startswith("not run: real runs take the same number of replicas for every stage")
    assert (real["real_step_ms"] > 0).all() and real["measured_winner"].sum() == 1
    runs_table = (reports / "data_parallel.csv").read_text()
    assert all(f"\n{m},0,digits," in runs_table for m in ("ddp", "hps")), runs_table


def _overlaps_in_smoke_figures(smoke, folder) -> list[tuple[str, str, str]]:
    """Every figure of the smoke run's report drawn again, each checked for overlapping text."""
    from trinity import plots
    from trinity.report import build_report

    run = yaml.safe_load((smoke / "params.yaml").read_text())["run"]
    plots.check_text, found = True, plots.text_overlaps_found
    found.clear()
    try:
        written = build_report(smoke / "results", smoke / "data", folder, run=run)
    finally:
        plots.check_text = False
    assert len([p for p in written["files"] if p.endswith(".png")]) >= 14
    return [(Path(path).name, a, b) for path, a, b in found]


def test_every_figure_of_the_smoke_run_is_readable(smoke, tmp_path):
    assert _overlaps_in_smoke_figures(smoke, tmp_path) == []


def test_mlflow_has_one_parent_with_a_finished_child_per_job(smoke):
    table = runs(smoke)
    parent = table[table["tags.trinity.stage"] == "pipeline"]
    assert len(parent) == 1 and parent["status"].iloc[0] == "FINISHED"
    children = table[table["tags.mlflow.parentRunId"] == parent["run_id"].iloc[0]]
    # 3 exports and profiles (tiny_cnn, transformer_lm, the regime's layered12), 2 embeddings, 7 placers and
    # 4 searches, the regime's 2 placers and 2 searches, validate, 2 data-parallel trainings, a layer profile,
    # 3 pipeline plans and 2 data-parallel methods measured for real on the model, the large pipeline case's
    # layer profile and plan, the model's whole-step profile, the families, report
    assert sorted(children["tags.trinity.stage"].value_counts().items()) == [
        ("embed", 2), ("export", 3), ("families", 1), ("layers", 2), ("measure", 5), ("partition", 4),
        ("profile", 3), ("report", 1), ("search", 15), ("train", 2), ("validate", 1), ("whole_step", 1)]
    assert set(children["status"]) == {"FINISHED"}
    trinity = children[children["tags.mlflow.runName"] == "search/tiny_cnn-p100x2-trinity-s0"]
    assert trinity["params.method.search.iterations"].iloc[0] == "4"
    assert trinity["metrics.best/step_time_ms"].iloc[0] > 0

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{smoke.parents[1] / 'mlflow.db'}")
    curve = client.get_metric_history(trinity["run_id"].iloc[0], "charts/best_step_time_ms")
    assert [m.step for m in curve] == [0, 1, 2, 3]  # a curve with steps, CleanRL's names
    validate = children[children["tags.trinity.stage"] == "validate"]["run_id"].iloc[0]
    assert {a.path for a in client.list_artifacts(validate)} >= {"sim_vs_real.json", "results.csv", "batch4"}


def test_dvc_says_nothing_to_reproduce_and_shows_metrics_and_plots(smoke):
    status = sh(BIN / "dvc", "status", "dvc.yaml", cwd=smoke)
    assert "up to date" in status.stdout, status.stdout
    metrics = sh(BIN / "dvc", "metrics", "show", cwd=smoke)
    assert "reports/metrics/tiny_cnn-p100x2.json" in metrics.stdout and "best_ms" in metrics.stdout
    assert max(map(len, metrics.stdout.splitlines())) <= 120, metrics.stdout  # fits a terminal
    plots = sh(BIN / "dvc", "plots", "show", "-o", "plots_html", cwd=smoke)
    assert (smoke / "plots_html" / "index.html").exists(), plots.stdout


def test_one_changed_search_parameter_reruns_only_what_depends_on_it(smoke):
    """The regime's runtime-only control: its one search and the report, not the other methods' searches
    sharing its stage (nor the validation, whose real runs read only the main cases' searches)."""
    params = yaml.safe_load((smoke / "params.yaml").read_text())
    params["methods"]["trinity-runtime"]["search"]["agent"]["lr"] = 0.002
    (smoke / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    repro = sh(BIN / "dvc", "repro", cwd=smoke).stdout
    ran = {line.split("'")[1] for line in repro.splitlines() if line.startswith("Running stage")}
    assert ran == {"search_regime@layered12-p100x2-trinity-runtime-0", "report"}, repro


def test_the_notebook_rebuilds_the_comparison_from_mlflow(smoke):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(smoke.parents[1] / "notebooks" / "analysis.ipynb", as_version=4)
    out = smoke / "notebook_figure.png"
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{smoke.parents[1] / 'mlflow.db'}", "TRINITY_EXPERIMENT": "trinity-smoke",
           "TRINITY_NOTEBOOK_OUT": str(out)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(smoke)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert out.stat().st_size > 0
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", []))
    assert "trinity" in text and "m-etf" in text


def test_a_multirun_is_one_parent_with_a_child_per_job(smoke):
    # composed from conf/ (where the parent-run callback is registered), as a user sweeps
    sh(sys.executable, "pipeline/search.py", "-m", "experiment=smoke", "job.model=tiny_cnn", "job.cluster=p100x2",
       "job.method=m-etf,trinity", "job.seed=0,1", "paths.results=sweep", "mlflow.experiment=sweep",
       cwd=smoke.parents[1], timeout=600)
    assert len(list((smoke / "sweep" / "search" / "tiny_cnn").glob("*.metrics.json"))) == 4  # the experiment's folder
    (record,) = (smoke.parents[1] / "multirun").glob("*/multirun.yaml")  # what was swept; no empty job folders
    assert [p.name for p in record.parent.iterdir()] == ["multirun.yaml"]
    table = runs(smoke, "sweep")
    parent = table[table["tags.trinity.stage"] == "multirun"]
    assert len(parent) == 1 and parent["status"].iloc[0] == "FINISHED"
    children = table[table["tags.mlflow.parentRunId"] == parent["run_id"].iloc[0]]
    assert sorted(children["tags.mlflow.runName"]) == [
        "search/tiny_cnn-p100x2-m-etf-s0", "search/tiny_cnn-p100x2-m-etf-s1",
        "search/tiny_cnn-p100x2-trinity-s0", "search/tiny_cnn-p100x2-trinity-s1"]
    assert children["metrics.best/step_time_ms"].notna().all() and set(children["status"]) == {"FINISHED"}


def _stage(project, stage, *overrides, env=None, check=False):
    return sh(sys.executable, project.parents[1] / "pipeline" / f"{stage}.py", "-cd", ".", "-cn", "params", *overrides,
              cwd=project,
              env=env, check=check, timeout=600)


def test_a_missing_input_names_the_stage_to_run(smoke, tmp_path):
    res = _stage(smoke, "embed", "job.model=resnet_small")
    assert res.returncode == 2
    assert "data/resnet_small/profile/graph.json.gz: missing; run the profile stage first (make repro " \
           "EXPERIMENT=smoke, or dvc repro experiments/smoke/dvc.yaml:profile@resnet_small)" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_tracking_server_that_is_down_is_one_line(smoke):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    res = _stage(smoke, "search", "job.model=tiny_cnn", "job.cluster=p100x2", "job.method=m-etf",
                 env={**ENV, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"MLflow tracking server http://127.0.0.1:{port} is not reachable" in res.stderr


def test_a_real_tracking_server_gets_the_runs(smoke, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([BIN / "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                               "--artifacts-destination", str(tmp_path / "artifacts"), "--workers", "1"],
                              cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        for _ in range(120):
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        _stage(smoke, "search", "job.model=tiny_cnn", "job.cluster=p100x2", "job.method=m-sct",
               "paths.results=server_results", env={**ENV, "MLFLOW_TRACKING_URI": uri}, check=True)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("trinity-smoke")
        (run,) = client.search_runs([exp.experiment_id])
        assert run.info.run_name == "search/tiny_cnn-p100x2-m-sct-s0" and run.info.status == "FINISHED"
        assert run.data.metrics["best/step_time_ms"] > 0
        assert "strategy.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_a_killed_search_resumes_from_its_checkpoint_in_the_same_run(smoke):
    args = ["job.model=tiny_cnn", "job.cluster=p100x2", "job.method=hierarchical", "paths.results=resume",
            "mlflow.experiment=resume", "methods.hierarchical.search.iterations=200",
            "methods.hierarchical.search.checkpoint_every=1"]
    before = set((smoke / "runs").glob("*"))
    proc = subprocess.Popen([sys.executable, smoke.parents[1] / "pipeline" / "search.py", "-cd", ".", "-cn", "params",
                             *args], cwd=smoke,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not any((d / "checkpoint.pt").exists()
                                             for d in set((smoke / "runs").glob("*")) - before):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # what DVC or a scheduler sends
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert not (smoke / "resume" / "search").exists() or not list((smoke / "resume" / "search").rglob("*.json"))
    killed = runs(smoke, "resume")
    assert list(killed["status"]) == ["KILLED"]
    resumed = _stage(smoke, "search", *args, check=True)
    assert "resuming" in resumed.stdout
    after = runs(smoke, "resume")
    assert list(after["run_id"]) == list(killed["run_id"]) and list(after["status"]) == ["FINISHED"]
