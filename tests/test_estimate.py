"""The experiment's estimate (trinity.estimate, trinity.stages.estimate): the scheduling maths on hand-built
cases, the cases an experiment runs, probes at a tiny budget and their cache, and the confirmation."""

from __future__ import annotations

import io

import pytest
from omegaconf import OmegaConf

from trinity import estimate as est
from trinity.stages import estimate as stage
from trinity.stages.config import compose


def test_a_job_is_its_process_its_setup_and_its_iterations():
    assert est.Cost(setup_s=2.0, per_unit_s=0.5, units=10, process_s=1.0).job_s == 8.0


def test_makespan_puts_the_longest_job_first_on_the_least_loaded_slot():
    # 5 -> A; 4 -> B; 3 -> B (7); 3 -> A (8); 3 -> B (10)
    assert est.makespan([3, 5, 3, 4, 3], 2) == 10
    assert est.makespan([3, 5, 3, 4, 3], 1) == 18
    assert est.makespan([3, 5, 3, 4, 3], 16) == 5
    assert est.makespan([], 4) == 0


def test_the_cases_of_an_experiment_and_its_regime():
    cfg = OmegaConf.create({"run": {
        "models": ["a"], "clusters": ["c1", "c2"], "placers": ["p"], "searches": ["s"], "seeds": [0, 1],
        "regime": {"models": ["r"], "clusters": ["c1"], "placers": [], "searches": ["s"], "seeds": [0]}}})
    assert est.cases(cfg) == [("place", "a", "c1", "p", 1), ("search", "a", "c1", "s", 2),
                              ("place", "a", "c2", "p", 1), ("search", "a", "c2", "s", 2),
                              ("search_regime", "r", "c1", "s", 1)]


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """The smoke experiment cut to one synthetic graph, a placer, a search and a local search."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(est, "process_overhead_s", lambda: 1.5)
    return compose(["experiment=smoke", "run.models=[layered12]", "run.regime.models=[]", "run.clusters=[p100x2]",
                    "run.placers=[m-etf]", "run.searches=[hierarchical,annealing]", "run.seeds=[0,1]",
                    f"paths.data={tmp_path / 'data'}"])


def test_probes_measure_each_method_at_a_tiny_budget_then_come_from_the_cache(tiny, tmp_path, monkeypatch):
    rows = est.estimate(tiny, tmp_path / "cache", progress=False)
    by_method = {r.method: r for r in rows}
    assert [(r.stage, r.method, r.jobs) for r in rows] == [("place", "m-etf", 1), ("search", "hierarchical", 2),
                                                           ("search", "annealing", 2)]
    assert by_method["m-etf"].cost.units == 0 and by_method["m-etf"].cost.per_unit_s == 0
    assert by_method["hierarchical"].cost.units == 4 and by_method["hierarchical"].cost.per_unit_s > 0
    assert by_method["annealing"].cost.units == 16
    assert all(r.cost.process_s == 1.5 for r in rows)
    assert est.job_durations(rows) == [r.cost.job_s for r in rows for _ in range(r.jobs)]

    def no_probe(*_):
        raise AssertionError("measured again")

    monkeypatch.setattr(est, "probe", no_probe)
    assert est.estimate(tiny, tmp_path / "cache", progress=False) == rows


def _rows():
    cost = est.Cost(setup_s=10.0, per_unit_s=1.0, units=50, process_s=0.0)  # 60 s a job
    return [est.Row("search", "m", "c", "trinity", 3, cost), est.Row("place", "m", "c", "m-etf", 1,
                                                                      est.Cost(6.0, 0.0, 0))]


def test_the_summary_of_four_jobs():
    s = stage.summary(_rows(), cluster_slots=16, local_slots=2)
    assert s["jobs"] == 4 and s["sequential_s"] == 186.0
    assert s["local_slurm_s"] == 120.0 and s["cluster_s"] == 60.0  # 60 + 60 | 60 + 6 on two slots
    assert s["longest_job"] == "trinity on m, c" and s["longest_job_s"] == 60.0


@pytest.fixture
def composed(tmp_path, monkeypatch):
    """The paper experiment composed into its folder, as `make params EXPERIMENT=paper` leaves it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments" / "paper").mkdir(parents=True)
    (tmp_path / "experiments" / "paper" / "params.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(
        {"run": {"name": "paper"}, "paths": {"data": "data", "runs": str(tmp_path / "elsewhere")}})))
    seen = []
    monkeypatch.setattr(stage, "estimate", lambda cfg, cache: seen.append(cfg) or _rows())
    return seen


def test_without_a_terminal_or_yes_nothing_starts(composed, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert stage.main(["--experiment", "paper"]) == 1
    out, err = capsys.readouterr()
    assert "Estimate of experiment 'paper'" in out
    assert "this machine, one job at a time (dvc repro): 3.1 min" in out
    assert err.strip() == "trinity estimate: not started: confirm with YES=1 (make) or --yes"
    assert stage.main(["--experiment", "paper", "--yes"]) == 0
    assert stage.main(["--experiment", "paper", "--print-only"]) == 0


def test_an_experiment_is_read_from_its_folder_with_its_paths_there(composed, tmp_path):
    assert stage.main(["--experiment", "paper", "--print-only"]) == 0
    assert composed[0].run.name == "paper"
    assert composed[0].paths.data == "experiments/paper/data"  # where its stages put its graphs
    assert composed[0].paths.runs == str(tmp_path / "elsewhere")  # an absolute path stays


def test_without_params_it_names_the_file_and_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert stage.main([]) == 2
    assert capsys.readouterr().err.strip() == \
        "trinity estimate: error: params.yaml: missing; run `make params EXPERIMENT=default` first"
    assert stage.main(["--experiment", "paper"]) == 2
    assert capsys.readouterr().err.strip() == \
        "trinity estimate: error: experiments/paper/params.yaml: missing; run `make params EXPERIMENT=paper` first"


def test_params_of_another_experiment_are_refused(composed, tmp_path, capsys):
    (tmp_path / "params.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create({"run": {"name": "smoke"}})))
    assert stage.main(["--print-only"]) == 2
    assert capsys.readouterr().err.strip() == ("trinity estimate: error: params.yaml: run.name: composes experiment "
                                               "'smoke', not 'default'; run `make params EXPERIMENT=default`")
