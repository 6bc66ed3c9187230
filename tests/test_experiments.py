"""Experiments in their own folders, one MLflow store per project, one-line override errors, and the
report's opening that says what was run."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.report import build_report, provenance
from trinity.stages import config
from trinity.track import default_uri, project_root

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_experiment_lives_at_the_root_and_every_other_in_its_own_folder():
    assert config.experiment_dir("default") == Path(".")
    assert config.experiment_dir("smoke") == Path("experiments/smoke")
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(TrinityError, match="run.name"):
            config.experiment_dir(bad)


def test_the_pipeline_file_is_rebased_on_code_alone():
    text = ("# runs pipeline/x.py\nstages:\n  s:\n    cmd: python pipeline/export.py job.model=${item}\n"
            "    deps:\n      - pipeline/export.py\n      - trinity/export\n      - \"${paths.data}/trinity/export\"\n"
            "    outs:\n      - ${paths.results}/pipeline/x\n")
    assert config.rebased_pipeline(text, Path("experiments/smoke")) == (
        "# runs pipeline/x.py\nstages:\n  s:\n    cmd: python ../../pipeline/export.py job.model=${item}\n"
        "    deps:\n      - ../../pipeline/export.py\n      - ../../trinity/export\n"
        "      - \"${paths.data}/trinity/export\"\n    outs:\n      - ${paths.results}/pipeline/x\n")


def test_writing_an_experiment_never_touches_the_default_files(tmp_path):
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    (tmp_path / "params.yaml").write_text("the default's\n")
    folder = config.write_experiment(config.compose(["experiment=smoke"]), tmp_path)
    assert folder == tmp_path / "experiments" / "smoke"
    assert (tmp_path / "params.yaml").read_text() == "the default's\n"
    assert (tmp_path / "dvc.yaml").read_text() == (ROOT / "dvc.yaml").read_text()
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["run"]["name"] == "smoke" and params["paths"]["results"] == "results"  # the folder's own
    pipeline = (folder / "dvc.yaml").read_text()
    assert "cmd: python ../../pipeline/export.py" in pipeline and "- ../../trinity/export" in pipeline
    assert config.write_experiment(config.compose([]), tmp_path) == tmp_path  # the default: the root
    assert yaml.safe_load((tmp_path / "params.yaml").read_text())["run"]["name"] == "default"


def test_a_stage_run_by_hand_uses_its_experiments_folder():
    cfg = config.compose(["experiment=smoke", "paths.results=sweeps/lr", "paths.runs=/abs/runs"])
    config.rebase_paths(cfg)
    assert (cfg.paths.data, cfg.paths.results, cfg.paths.runs) == (
        "experiments/smoke/data", "experiments/smoke/sweeps/lr", "/abs/runs")
    default = config.compose([])
    config.rebase_paths(default)
    assert (default.paths.data, default.paths.results) == ("data", "results")


def test_one_store_per_project_wherever_a_command_runs(tmp_path):
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "experiments" / "smoke").mkdir(parents=True)
    assert project_root(tmp_path / "experiments" / "smoke") == tmp_path.resolve()
    assert default_uri(tmp_path / "experiments" / "smoke") == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    assert project_root(outside) == outside.resolve()


@pytest.mark.parametrize("override,message", [
    ("job.modle=x", "trinity search: error: job.modle: unknown key (not in conf/ or params.yaml)"),
    ("+job.modle=x", "trinity search: error: job.modle: unknown key 'modle'"),
    ("methods.trinity.search.lrr=1", "trinity search: error: methods.trinity.search.lrr: unknown key"),
    ("experiment=smok", "trinity search: error: In 'config': Could not find 'experiment/smok' Available options in "
                        "'experiment': default paper smoke"),
    ("job.seed=a", "trinity search: error: job.seed: must be an integer >= 0, got 'a'"),
])
def test_a_bad_override_is_one_line_before_any_job_starts(override, message, tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "pipeline" / "search.py"), override], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == message.strip() or res.stderr.startswith(message), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "mlflow.db").exists()


def test_make_params_refuses_an_experiment_that_does_not_exist_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "trinity.stages.params", "experiment=nope"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "Could not find 'experiment/nope' Available options in 'experiment': default paper smoke" in res.stderr


def test_a_pipeline_for_an_experiment_that_was_not_composed_is_refused(tmp_path):
    res = subprocess.run([sys.executable, "-m", "trinity.stages.tracked", "mine", "--", "true"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip() == ("trinity: error: experiments/mine/params.yaml: missing; run "
                                  "`make params EXPERIMENT=mine` first")


def test_the_report_opens_with_what_was_run():
    cfg = config.compose(["experiment=smoke"])
    run = OmegaConf.to_container(cfg.run, resolve=True)
    methods = OmegaConf.to_container(cfg.methods, resolve=True)
    text = provenance.header(run, methods, commit_id="abc123", started=1000.0, now=1000.0 + 330,
                             data_parallel_epochs=3)
    assert text.startswith("**Experiment `smoke`** (conf/experiment/smoke.yaml), commit abc123, made 1970-01-01 "
                           "00:22 UTC; wall time: 5.5 min from the pipeline's start to this report.")
    assert "| op placement | models tiny_cnn; clusters p100x2; seeds 0 |" in text
    assert "| trinity | 4 iterations x 4 samples |" in text
    assert "| trinity-warm | 4 iterations x 4 samples, warm start m-etf (20 imitation steps) |" in text
    assert "| annealing | 16 simulator calls |" in text
    unset = provenance.budget({"kind": "search", "search": {"iterations": 5}})  # the loop's default batch
    assert unset == "5 iterations x 8 samples"
    assert "methods tapp, pipedream, dp; tapp: 5 iterations x 8 samples; seeds 0" in text
    assert "| data parallelism | methods ddp, hps; 3 epochs; seeds 0 |" in text
    assert "wall time: unknown" in provenance.header(run, methods, commit_id="x")
    assert provenance.commit("/") == "unknown (not a git checkout)"


def test_the_report_shows_only_what_its_run_lists(tmp_path):
    from test_report import GRAPH, nested

    from trinity.graph import save_graph

    save_graph(GRAPH, tmp_path / "data" / "m" / "profile" / "graph.json.gz")
    results = tmp_path / "results"
    nested(results, "m", "p100x2", "m-etf", 0, 11.0, 5.0, 0.5)
    nested(results, "m", "p100x2", "trinity", 0, 9.0, 3.0, 0.5, seconds_per_1000=80.0)
    nested(results, "m", "p100x2", "trinity", 7, 1.0, 3.0, 0.5, seconds_per_1000=80.0)  # an earlier run's seed
    nested(results, "m", "p100x4", "m-etf", 0, 2.0, 5.0, 0.5)  # an earlier run's cluster
    run = {"name": "mine", "models": ["m"], "clusters": ["p100x2"], "placers": ["m-etf"], "searches": ["trinity"],
           "seeds": [0]}
    written = build_report(results, tmp_path / "data", tmp_path / "reports", run=run, preamble="**Experiment**\n")
    assert written["summary"]["cases"] == {"m/p100x2": {"best_method": "trinity", "best_step_time_ms": 9.0}}
    report = (tmp_path / "reports" / "REPORT.md").read_text()
    assert report.startswith("# Trinity: report\n\n**Experiment**\n")
    with pytest.raises(TrinityError, match="no search result of what `run` lists"):
        build_report(results, tmp_path / "data", tmp_path / "r2", run={**run, "models": ["other"]})


def test_a_missing_input_names_the_command_for_its_experiment(tmp_path, monkeypatch):
    (tmp_path / ".dvc").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrinityError, match=r"missing; run the profile stage first \(make repro EXPERIMENT=smoke, "
                                           r"or dvc repro experiments/smoke/dvc.yaml:profile@tiny_cnn\)"):
        config.require(Path("experiments/smoke/data/tiny_cnn/profile/graph.json.gz"), "profile", "tiny_cnn")
    monkeypatch.chdir(tmp_path / ".dvc")  # relative to where it runs: a stage runs in its experiment's folder
    with pytest.raises(TrinityError, match=r"\(dvc repro profile@tiny_cnn\)"):
        config.require(Path("../data/tiny_cnn/profile/graph.json.gz"), "profile", "tiny_cnn")


def test_the_commit_counts_changed_code_not_the_outputs_the_run_rewrites(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True, timeout=60)

    for path in ("trinity/a.py", "reports/REPORT.md", "experiments/smoke/params.yaml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    head = provenance.commit(tmp_path)
    assert len(head) == 12 and "+" not in head
    (tmp_path / "reports" / "REPORT.md").write_text("rewritten by the report stage\n")
    assert provenance.commit(tmp_path / "experiments" / "smoke") == head
    (tmp_path / "experiments" / "smoke" / "params.yaml").write_text("y\n")
    assert provenance.commit(tmp_path / "experiments" / "smoke") == f"{head} + uncommitted changes"
    git("checkout", "experiments")
    (tmp_path / "trinity" / "a.py").write_text("changed\n")
    assert provenance.commit(tmp_path) == f"{head} + uncommitted changes"


@pytest.mark.parametrize("argv0, frozen", [("pipeline/search.py", "True"), ("trinity", "False")])
def test_a_stage_script_leaves_its_heap_to_the_process_end(argv0, frozen):
    """A stage script's last exit handler freezes the heap, so the interpreter's teardown does not collect it
    (1-2 s a job); any other program importing the stages keeps its collector."""
    code = ("import atexit, gc, sys; sys.argv = [sys.argv[1]]; import trinity.stages; atexit._run_exitfuncs(); "
            "print(gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", code, argv0], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == frozen
