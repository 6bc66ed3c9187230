"""conf/ composes for every experiment and every job, into the library's typed objects."""

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from trinity.cluster import load_cluster
from trinity.errors import TrinityError
from trinity.models import known_models
from trinity.rl.search import SearchConfig
from trinity.stages import config
from trinity.stages.config import op_placement_cases

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_every_job_is_typed(experiment):
    cfg = config.compose([f"experiment={experiment}"])
    assert cfg.run.name == experiment
    for model in cfg.run.models:
        assert cfg.models[model].name in known_models() or cfg.models[model].source or cfg.models[model].synthetic
    for cluster in cfg.run.clusters:
        assert config.cluster(cfg, cluster).n_devices == len(cfg.clusters[cluster].devices)
    for method in [*cfg.run.placers, *cfg.run.searches]:
        if cfg.methods[method].kind == "search":
            sc = config.search_config(cfg, method, seed=3)
            assert isinstance(sc, SearchConfig) and sc.seed == 3 and sc.method == method.removesuffix("-warm")
            assert sc.reward == config.reward(cfg)
    assert set(cfg.run.validate) <= set(cfg.run.graphs)  # exported and profiled; searched or with its own strategies
    assert all(m in cfg.run.models or cfg.validation.placers or cfg.validation.search_samples for m in cfg.run.validate)


def test_experiments_differ_where_they_should():
    smoke, default, paper = (config.compose([f"experiment={e}"]) for e in ("smoke", "default", "paper"))
    assert smoke.methods.trinity.search.iterations < default.methods.trinity.search.iterations
    assert paper.methods.trinity.search.iterations == 1000  # the paper's budget
    assert set(paper.run.models) == {"inception_v3", "nasnet_large", "pnasnet_large", "nmt_2layer", "gnmt"}
    assert set(paper.run.clusters) == {"p100x2", "p100x4"} and len(paper.run.seeds) >= 3
    every_method = {p.stem for p in (CONF / "method").glob("*.yaml")}
    def runs(e):
        large = e.run.get("pipeline_parallel_large") or {"methods": []}
        return {*e.run.placers, *e.run.searches, *e.run.data_parallel.methods, *e.run.pipeline_parallel.methods,
                *large["methods"]}

    assert runs(default) == every_method - {"trinity-runtime"}  # the runtime-only control: the regime's
    # learned-list: not in the paper's set (not run here; its per-iteration cost there is not measured)
    assert runs(paper) == every_method - {"optimum", "trinity-runtime", "learned-list"}  # too large there
    for experiment in (smoke, default, paper):  # the paper's regime compares both rewards
        assert {"trinity-warm", "trinity-runtime"} <= set(experiment.run.regime.searches)
        assert not set(experiment.run.regime.models) & set(experiment.run.models)
        warm = config.search_config(experiment, "trinity-warm", 0)
        runtime_only = config.search_config(experiment, "trinity-runtime", 0)
        # the control differs from trinity-warm in its reward alone: same budget, same warm start
        assert (runtime_only.reward.beta, runtime_only.reward.gamma) == (0.0, 0.0)
        runtime_only.reward = warm.reward
        assert runtime_only == warm
    regime = default.models[default.run.regime.models[0]]
    assert (regime.batch, regime.options.image_size, regime.costs) == (64, 299, "roofline")  # the paper's sizes
    for experiment in (smoke, default, paper):  # a seeded method runs per seed, a placer once
        assert {experiment.methods[m].kind for m in experiment.run.searches} <= {"search", "local-search"}
        assert {experiment.methods[m].kind for m in experiment.run.placers} == {"placer"}


@pytest.mark.parametrize("group,table", [("model", "models"), ("method", "methods")])
def test_every_group_option_is_in_the_catalogue(group, table):
    cfg = config.compose()
    assert {p.stem for p in (CONF / group).glob("*.yaml")} == set(cfg[table])


def test_clusters_come_from_the_library_presets_alone():
    """One copy of each preset: conf/ composes trinity/conf/cluster through Hydra's search path."""
    assert not (CONF / "cluster").exists()
    cfg = config.compose()
    for name in cfg.clusters:
        assert config.cluster(cfg, name).to_dict() == load_cluster(name).to_dict()


def test_a_typo_in_an_override_names_the_valid_choices():
    with pytest.raises(TrinityError, match="Available options in 'experiment'.*default.*paper.*smoke"):
        config.compose(["experiment=smok"])


def test_a_wrong_type_or_unknown_key_names_the_key():
    cfg = config.compose(["methods.trinity.search.iterations=many"])
    with pytest.raises(TrinityError, match=r"methods\.trinity\.search.*iterations"):
        config.search_config(cfg, "trinity", 0)
    cfg = config.compose(["+methods.trinity.search.iteratons=5"])
    with pytest.raises(TrinityError, match="iteratons"):
        config.search_config(cfg, "trinity", 0)
    cfg = config.compose(["reward.alpha=-1"])
    with pytest.raises(TrinityError, match="alpha"):
        config.reward(cfg)


def test_an_unknown_job_names_the_choices():
    cfg = config.compose(["job.method=trinty"])
    with pytest.raises(TrinityError, match="unknown method 'trinty'; choose one of .*trinity"):
        config.job(cfg)


def test_params_file_is_the_resolved_composition(tmp_path):
    cfg = config.compose(["experiment=smoke", "methods.trinity.search.agent.lr=0.01"])
    config.write_params(cfg, tmp_path / "params.yaml")
    written = OmegaConf.load(tmp_path / "params.yaml")
    assert "hydra" not in written and written.run.name == "smoke"
    assert written.methods.trinity.search.agent.lr == 0.01
    assert "${" not in OmegaConf.to_yaml(written)  # interpolations resolved
    assert OmegaConf.to_container(written) == OmegaConf.to_container(cfg, resolve=True) | {}


def test_flat_params_name_every_setting_of_a_search_job():
    cfg = config.compose(["experiment=smoke"])
    job = config.Job("tiny_cnn", "p100x2", "trinity", 0)
    flat = config.flat_params(cfg, job, "search")
    assert flat["method.search.iterations"] == 4 and flat["reward.alpha"] == 0.5
    assert flat["cluster.devices"] == 2 and flat["job.method"] == cfg.job.method
    assert flat["embedding.dim"] == 4


@pytest.mark.parametrize("override,field,message", [
    ("run.seeds=[]", "run.seeds", "must be a non-empty list of integers >= 0, got []"),
    ("run.data_parallel.seeds=[-1]", "run.data_parallel.seeds", "got [-1]"),
    ("run.placers=[trinity]", "run.placers", "method 'trinity' is a search method; run.placers takes placer"),
    ("run.searches=[daso]", "run.searches", "'daso' is a data-parallel method"),
    ("run.models=[nope]", "run.models", "unknown model 'nope'"),
    ("run.regime.seeds=[]", "run.regime.seeds", "must be a non-empty list of integers >= 0, got []"),
    ("run.regime.models=[tiny_cnn]", "run.regime.models", "['tiny_cnn'] are in run.models too"),
    ("run.regime.models=[resnet_small]", "run.regime.models", "have no op graph: add them to run.graphs"),
    ("run.regime.searches=[m-etf]", "run.regime.searches", "'m-etf' is a placer method"),
    ("run.regime.clusters=[p100x3]", "run.regime.clusters", "unknown cluster 'p100x3'"),
    ("run.regime.reward.comm_tolerance_GB=0", "run.regime.reward", "both tolerances must be > 0"),
    ("run.regime.reward.memory_tolerance_GB=-1", "run.regime.reward", "memory_tolerance_GB must be a finite number"),
])
def test_a_bad_run_list_is_refused_when_composed(override, field, message):
    from trinity.stages.params import main

    cfg = config.compose(["experiment=smoke", override])
    with pytest.raises(TrinityError, match=re.escape(message)) as err:
        config.check_run(cfg)
    assert err.value.field == field
    assert main(["experiment=smoke", override]) == 2


def test_zero_tolerances_are_refused_naming_the_key():
    cfg = config.compose(["experiment=smoke", "reward.memory_tolerance_GB=0"])
    with pytest.raises(TrinityError, match="tolerances must be > 0"):
        config.search_config(cfg, "trinity", 0)
    runtime_only = config.search_config(config.compose(["experiment=smoke"]), "trinity-runtime", 0)
    assert runtime_only.reward.beta == 0 and runtime_only.reward.gamma == 0 and runtime_only.reward.alpha == 0.5


def test_the_default_trinity_races_five_racers_for_80_turns_each_then_the_leader_for_260():
    from trinity.stages.config import search_config

    sc = search_config(config.compose(["experiment=default"]), "trinity", seed=0)
    assert (sc.iterations, sc.racers, sc.race_iterations) == (660, 5, 80)
    assert sc.iterations - sc.racers * sc.race_iterations == 260
    # the METIS racer (the agent's own options), then four block racers over bisection groups
    block = {"block_moves": 0.25, "op_costs": "cluster", "policy": {"locality_order": "bisection"}}
    assert sc.race_agents == [{}] + [block] * 4 and sc.racer_agent(0) == sc.agent


def test_the_default_validation_covers_two_models_twice_and_bad_settings_name_their_field():
    import os

    from trinity.stages.validate import check_validation

    cfg = config.compose(["experiment=default"])
    assert list(cfg.run.validate) == ["inception_v3", "nmt_2layer_s12"] and cfg.validation.runs == 2
    assert check_validation(cfg, "inception_v3") == [8] and check_validation(cfg, "nmt_2layer_s12") == [8]
    assert config.compose(["experiment=smoke"]).validation.runs == 1
    assert list(cfg.validation.anchor_range) == [0.5, 2.0]  # the smoke graph's ms steps get a wider one
    assert list(config.compose(["experiment=smoke"]).validation.anchor_range) == [0.2, 20.0]
    assert cfg.validation.refit_to_rounds is False and cfg.validation.sync_to_rounds is False
    cores = len(os.sched_getaffinity(0))
    for override, model, field in (("validation.batches=[0]", "inception_v3", "validation.batches[0]"),
                                   ("validation.anchor_range=[1.1,2]", "inception_v3", "validation.anchor_range"),
                                   ("validation.anchor_range=[0.5]", "inception_v3", "validation.anchor_range"),
                                   ("validation.anchor_range=[0.5,fast]", "inception_v3", "validation.anchor_range"),
                                   ("validation.batches=[8]", "layered12", "validation.batches"),
                                   ("validation.runs=0", "inception_v3", "validation.runs"),
                                   ("validation.refit_to_rounds=sometimes", "inception_v3",
                                    "validation.refit_to_rounds"),
                                   ("validation.sync_to_rounds=1", "inception_v3", "validation.sync_to_rounds"),
                                   (f"validation.workers={cores + 1}", "inception_v3", "validation.workers"),
                                   ("validation.placers=[]", "nmt_2layer_s12", "validation.placers")):
        bad = config.compose(["experiment=default", override]
                             + (["validation.search_samples=0", "validation.blends=[]"] if "placers" in override else []))
        with pytest.raises(TrinityError) as err:
            check_validation(bad, model)
        assert err.value.field == field, override
    with pytest.raises(TrinityError, match="unknown model 'nmt'"):  # a model outside the catalogue
        config.check_run(config.compose(["experiment=default", "run.validate=[nmt]"]))
    with pytest.raises(TrinityError, match="run.graphs") as err:  # one nobody exports and profiles
        config.check_run(config.compose(["experiment=default", "run.validate=[gnmt]"]))
    assert err.value.field == "run.validate"


def test_op_placement_cases_list_the_runs_cases_then_the_regimes():
    params = {"run": {"models": ["a", "b"], "clusters": ["c2", "c4"],
                      "regime": {"models": ["r"], "clusters": ["c4"], "reward": {"comm_tolerance_GB": 0.5}}}}
    assert [tuple(c) for c in op_placement_cases(params)] == [
        ("a", "c2", {}, False), ("a", "c4", {}, False), ("b", "c2", {}, False), ("b", "c4", {}, False),
        ("r", "c4", {"comm_tolerance_GB": 0.5}, True)]
    assert op_placement_cases({"run": {"models": ["a"], "clusters": ["c2"]}}) == [("a", "c2", {}, False)]
