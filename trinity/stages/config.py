"""The pipeline's composed configuration, read and checked.

`conf/` (Hydra) composes into one catalogue (every model, cluster and
method) plus `run` (what the pipeline runs) and `job` (what one stage
invocation runs); see conf/config.yaml. This module turns it into the
library's typed objects: hyperparameters are merged over the library's own
dataclasses (OmegaConf structured configs), so a misspelt key or a wrong
type is one line naming the key, not a surprise mid-search.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trinity.cluster import Cluster, cluster_from_dict
from trinity.errors import TrinityError
from trinity.reward import MDPEConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the checkout's conf/ (stages run from a checkout)
PARAMS_FILE = "params.yaml"
PIPELINE_FILE = "dvc.yaml"
DEFAULT_EXPERIMENT = "default"
EXPERIMENTS_DIR = Path("experiments")


@dataclass(frozen=True)
class Job:
    """One unit of work of a stage: a model (and for search, a cluster, method and seed)."""

    model: str
    cluster: str
    method: str
    seed: int

    @property
    def case(self) -> str:
        return f"{self.model}-{self.cluster}-{self.method}-s{self.seed}"


def compose(overrides: list[str] = (), config_dir: str | Path = CONF_DIR) -> DictConfig:
    """conf/ composed with Hydra overrides (``experiment=smoke``, ``methods.trinity.search.agent.lr=1e-3``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:  # a typo names the valid choices
        raise TrinityError(hydra_error_line(exc), source=str(config_dir)) from None


def hydra_error_line(exc: BaseException) -> str:
    """Hydra's error about an override, in one line: an unknown key named as such, an unknown option
    with its choices (without Hydra's search path)."""
    text = " ".join(str(exc).split())
    unknown = re.match(r"Could not override '([^']+)'\.", text)
    if unknown:
        return (f"{unknown.group(1)}: unknown key (not in conf/ or params.yaml): check its spelling; "
                f"to add a key on purpose write +{unknown.group(1)}=...")
    return text.split(" Config search path:")[0]


#: which method kinds each list of `run` takes
RUN_KINDS = {"placers": ("placer",), "searches": ("search", "local-search"),
             "regime.placers": ("placer",), "regime.searches": ("search", "local-search"),
             "data_parallel.methods": ("data-parallel",), "pipeline_parallel.methods": ("pipeline-parallel",),
             "pipeline_parallel_large.methods": ("pipeline-parallel",)}


def check_run(cfg: DictConfig) -> None:
    """What `run` lists exists in the catalogue, in the right list; seed lists are non-empty integers."""
    run = cfg.run
    for key, table in (("models", "models"), ("graphs", "models"), ("clusters", "clusters"), ("validate", "models"),
                       ("pipeline_parallel.models", "models"), ("pipeline_parallel.clusters", "clusters"),
                       ("regime.models", "models"), ("regime.clusters", "clusters"),
                       ("pipeline_parallel_large.models", "models"), ("pipeline_parallel_large.clusters", "clusters")):
        for name in OmegaConf.select(run, key) or []:
            if name not in cfg[table]:
                raise TrinityError(f"unknown {table[:-1]} {name!r}; choose from {', '.join(cfg[table])}",
                                   field=f"run.{key}")
    for name in run.get("validate") or []:
        if name not in (run.get("graphs") or []):
            raise TrinityError(f"{name!r} is validated but never exported and profiled: add it to run.graphs",
                               field="run.validate")
    lists = {"placers": run.get("placers") or [], "searches": run.get("searches") or []}
    for family in ("data_parallel", "pipeline_parallel", "pipeline_parallel_large"):
        if run.get(family):
            lists[f"{family}.methods"] = run[family].methods or []
    if run.get("regime"):
        lists["regime.placers"], lists["regime.searches"] = run.regime.placers or [], run.regime.searches or []
    if run.get("pipeline_parallel"):
        for name in cfg.pipeline_parallel.measure.clusters:
            if name not in run.pipeline_parallel.clusters:
                raise TrinityError(f"{name!r} is not in run.pipeline_parallel.clusters "
                                   f"{list(run.pipeline_parallel.clusters)}: its plans would not exist",
                                   field="pipeline_parallel.measure.clusters")
        if 0 not in run.pipeline_parallel.seeds:
            raise TrinityError("must include seed 0 (the measure stage runs the seed-0 plans)",
                               field="run.pipeline_parallel.seeds")
    for key, names in lists.items():
        for name in names:
            if name not in cfg.methods:
                raise TrinityError(f"unknown method {name!r}; choose from {', '.join(cfg.methods)}", field=f"run.{key}")
            if cfg.methods[name].kind not in RUN_KINDS[key]:
                raise TrinityError(f"method {name!r} is a {cfg.methods[name].kind} method; run.{key} takes "
                                   f"{' or '.join(RUN_KINDS[key])} methods", field=f"run.{key}")
    graphs = set(run.get("graphs") or [])
    for key in ("models", "families.models", "regime.models"):
        missing = [m for m in (OmegaConf.select(cfg, f"run.{key}") or []) if m not in graphs]
        if missing:
            raise TrinityError(f"{missing} have no op graph: add them to run.graphs", field=f"run.{key}")
    if run.get("families"):
        for name in run.families.models:
            if name not in (run.pipeline_parallel.models if run.get("pipeline_parallel") else []):
                raise TrinityError(f"{name!r} has no layer profile or plans: add it to run.pipeline_parallel.models",
                                   field="run.families.models")
        for name in run.families.clusters:
            if name not in run.pipeline_parallel.clusters:
                raise TrinityError(f"{name!r} has no pipeline plans: add it to run.pipeline_parallel.clusters",
                                   field="run.families.clusters")
    if run.get("regime"):
        _check_regime(cfg)
    for key in ("seeds", "data_parallel.seeds", "pipeline_parallel.seeds", "regime.seeds"):
        seeds = OmegaConf.select(cfg, f"run.{key}")
        if seeds is None and key != "seeds":
            continue
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            shown = OmegaConf.to_container(seeds) if isinstance(seeds, DictConfig | ListConfig) else seeds
            raise TrinityError(f"must be a non-empty list of integers >= 0, got {shown!r}", field=f"run.{key}")


def _check_regime(cfg: DictConfig) -> None:
    """The paper's regime: its own graphs (embedded by their own stage) and tolerances a reward accepts."""
    both = [m for m in cfg.run.regime.models if m in cfg.run.models]
    if both:
        raise TrinityError(f"{both} are in run.models too: the regime's graphs are searched by their own stages",
                           field="run.regime.models")
    typed(MDPEConfig, cfg.reward, cfg.run.regime.reward, where="run.regime.reward")


class OpPlacementCase(NamedTuple):
    model: str
    cluster: str
    reward: dict  # the reward's overrides (the regime's own; {} for run.models)
    regime: bool  # one of the paper's regime's cases (run.regime)


def op_placement_cases(params: dict) -> list[OpPlacementCase]:
    """Every op-placement case of an experiment's params (params.yaml read as a dict, or the composed config):
    run.models x run.clusters, then the paper's regime's models x clusters with its reward overrides."""
    run = params["run"]
    regime = run.get("regime") or {}
    return ([OpPlacementCase(m, c, {}, False) for m in run["models"] for c in run["clusters"]]
            + [OpPlacementCase(m, c, dict(regime.get("reward") or {}), True)
               for m in regime.get("models", []) for c in regime.get("clusters", [])])


def write_params(cfg: DictConfig, path: str | os.PathLike = PARAMS_FILE) -> None:
    """Write the composed configuration (interpolations resolved) where DVC reads parameters."""
    from trinity.fileio import atomic_write_bytes

    check_run(cfg)
    doc = OmegaConf.to_container(cfg, resolve=True)
    doc.pop("hydra", None)
    header = "# Composed from conf/ by `make params` (or `dvc exp run`): edit conf/, not this file.\n"
    atomic_write_bytes(path, (header + OmegaConf.to_yaml(OmegaConf.create(doc))).encode())


# ---------------------------------------------------------------- experiments: one folder each
def experiment_dir(name: str) -> Path:
    """An experiment's folder, relative to the checkout root: its params.yaml, dvc.yaml, dvc.lock and every
    output (``paths.*``: data/, results/, reports/, runs/). The default experiment's is the root itself, where
    its committed results have always been; every other's is ``experiments/<name>/``, so that no experiment
    overwrites another's files or mixes them into its report."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)):
        raise TrinityError(f"{name!r} cannot name a folder (letters, digits, '_', '.', '-')", field="run.name")
    return Path(".") if name == DEFAULT_EXPERIMENT else EXPERIMENTS_DIR / str(name)


def experiment_params(name: str) -> tuple[Path, DictConfig]:
    """Experiment ``name``'s folder and the config `make params EXPERIMENT=name` composed there; a missing file
    or one composed for another experiment is refused naming the command that makes it."""
    folder = experiment_dir(name)
    params = folder / PARAMS_FILE
    if not params.exists():
        raise TrinityError(f"missing; run `make params EXPERIMENT={name}` first", source=str(params))
    cfg = OmegaConf.load(params)
    if cfg.run.name != name:
        raise TrinityError(f"composes experiment {cfg.run.name!r}, not {name!r}; run `make params "
                           f"EXPERIMENT={name}`", source=str(params), field="run.name")
    return folder, cfg


def rebased_pipeline(text: str, folder: Path) -> str:
    """The root dvc.yaml's text for a pipeline in ``folder``: the scripts and code it runs and depends on
    (``pipeline/``, ``trinity/``) named from there; outputs and parameters are the folder's own."""
    up = "../" * len(Path(folder).parts)
    return "\n".join(line if line.lstrip().startswith("#") else
                     re.sub(r"(?<=[\s\"'])(?=(?:pipeline|trinity)/)", up, line) for line in text.split("\n"))


def write_experiment(cfg: DictConfig, root: str | os.PathLike = ".") -> Path:
    """Compose ``cfg`` into its experiment's folder: ``params.yaml``, and for every experiment but the
    default a ``dvc.yaml`` made from the root one (regenerated each time, so it never drifts). Returns
    the folder, where `dvc repro` runs the experiment."""
    from trinity.fileio import atomic_write_bytes

    root = Path(root)
    folder = root / experiment_dir(cfg.run.name)
    folder.mkdir(parents=True, exist_ok=True)
    write_params(cfg, folder / PARAMS_FILE)
    if folder.resolve() != root.resolve():
        source = root / PIPELINE_FILE
        header = (f"# Made from the checkout's {PIPELINE_FILE} by `make params EXPERIMENT={cfg.run.name}`: "
                  f"edit that one, not this copy.\n")
        atomic_write_bytes(folder / PIPELINE_FILE,
                           (header + rebased_pipeline(source.read_text(), experiment_dir(cfg.run.name))).encode())
    return folder


def rebase_paths(cfg: DictConfig) -> None:
    """A stage run by hand from the checkout root with ``experiment=NAME`` reads and writes NAME's folder:
    the relative ``paths.*`` of conf/ are relative to the experiment's folder, as DVC runs them."""
    folder = experiment_dir(cfg.run.name)
    for key, value in cfg.paths.items():
        if isinstance(value, str) and value and not os.path.isabs(value):
            cfg.paths[key] = str(folder / value)


def job(cfg: DictConfig) -> Job:
    j = cfg.job
    unknown = sorted(set(j) - {"model", "cluster", "method", "seed"})
    if unknown:
        raise TrinityError(f"unknown key {unknown[0]!r}; a job has model, cluster, method and seed",
                           field=f"job.{unknown[0]}")
    for key, table in (("model", "models"), ("cluster", "clusters"), ("method", "methods")):
        if j[key] not in cfg[table]:
            raise TrinityError(f"unknown {key} {j[key]!r}; choose one of {', '.join(cfg[table])}",
                               field=f"job.{key}")
    if not isinstance(j.seed, int) or isinstance(j.seed, bool) or j.seed < 0:
        raise TrinityError(f"must be an integer >= 0, got {j.seed!r}", field="job.seed")
    return Job(str(j.model), str(j.cluster), str(j.method), j.seed)


def cluster(cfg: DictConfig, name: str) -> Cluster:
    return cluster_from_dict(OmegaConf.to_container(cfg.clusters[name], resolve=True), f"clusters.{name}")


def typed(schema: type, *nodes: Any, where: str):
    """``nodes`` merged over the dataclass ``schema``: wrong types and unknown keys are user errors."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), *nodes))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        msg = str(exc).splitlines()[0]
        raise TrinityError(msg, field=f"{where}.{key}" if key else where) from None
    except TrinityError as exc:  # the dataclass's own checks, naming their field
        raise TrinityError(exc.message, field=f"{where}.{exc.field}" if exc.field else where) from None
    except (ValueError, TypeError) as exc:  # the dataclass's own checks (__post_init__)
        raise TrinityError(str(exc), field=where) from None


def reward(cfg: DictConfig) -> MDPEConfig:
    return typed(MDPEConfig, cfg.reward, where="reward")


def search_config(cfg: DictConfig, method: str, seed: int):
    """The method's typed ``trinity.rl.search.SearchConfig`` (torch is imported here, by the stages that search)."""
    from trinity.rl.search import SearchConfig

    node = cfg.methods[method]
    if node.kind != "search":
        raise TrinityError(f"method {method!r} is a placer, not a search", field=f"methods.{method}.kind")
    search = OmegaConf.to_container(node.search, resolve=True)
    own_reward = search.pop("reward", None) or {}  # a method may change the reward's keys (e.g. runtime only)
    sc = typed(SearchConfig, search, {"seed": seed}, where=f"methods.{method}.search")
    # frozen dataclass: OmegaConf cannot merge into it
    sc.reward = typed(MDPEConfig, cfg.reward, own_reward, where=f"methods.{method}.search.reward")
    return sc


def flat_params(cfg: DictConfig, j: Job, stage: str) -> dict[str, Any]:
    """The config one job used, flattened to ``a.b.c`` keys for MLflow params."""
    sections: dict[str, Any] = {"job": OmegaConf.to_container(cfg.job), "run": {"name": cfg.run.name}}
    sections["model"] = OmegaConf.to_container(cfg.models[j.model], resolve=True)
    if stage == "profile":
        sections["profile"] = OmegaConf.to_container(cfg.profile)
    if stage in ("embed", "search"):
        sections["embedding"] = OmegaConf.to_container(cfg.embedding)
    if stage == "search":
        sections["cluster"] = {"name": j.cluster, "devices": len(cfg.clusters[j.cluster].devices)}
        sections["method"] = OmegaConf.to_container(cfg.methods[j.method])
        sections["reward"] = OmegaConf.to_container(cfg.reward)
    if stage == "validate":
        sections["validation"] = OmegaConf.to_container(cfg.validation)
    if stage == "train":
        sections = {"job": {"method": j.method, "seed": j.seed}, "run": sections["run"],
                    "method": OmegaConf.to_container(cfg.methods[j.method]),
                    "data_parallel": OmegaConf.to_container(cfg.data_parallel, resolve=True)}
    if stage == "families":
        sections["families"] = OmegaConf.to_container(cfg.run.families, resolve=True)
    if stage in ("layers", "whole_step", "partition", "measure"):
        sections["pipeline_parallel"] = OmegaConf.to_container(cfg.pipeline_parallel, resolve=True)
    if stage in ("partition", "measure"):
        sections["method"] = OmegaConf.to_container(cfg.methods[j.method])
        sections["cluster"] = {"name": j.cluster, "devices": len(cfg.clusters[j.cluster].devices)}
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    walk("", sections)
    return out


# ---------------------------------------------------------------- where each stage writes
def graph_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.data) / model / "export" / "graph.json.gz"


def profiled_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.data) / model / "profile" / "graph.json.gz"


def features_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.data) / model / "embed" / "features.npz"


def search_dir(cfg: DictConfig, j: Job) -> Path:
    return Path(cfg.paths.results) / "search" / j.model / f"{j.cluster}-{j.method}-s{j.seed}"


def metrics_beside(folder: Path) -> Path:
    """``<folder>.metrics.json``: DVC cannot take a file inside an output folder as metrics."""
    return folder.with_name(folder.name + ".metrics.json")


def search_metrics_file(cfg: DictConfig, j: Job) -> Path:
    return metrics_beside(search_dir(cfg, j))


def train_dir(cfg: DictConfig, j: Job) -> Path:
    """A data-parallel run's results: ``results/train/<method>-s<seed>/`` (metrics beside)."""
    return Path(cfg.paths.results) / "train" / f"{j.method}-s{j.seed}"


def train_config(cfg: DictConfig):
    from trinity.data_parallel import TrainConfig

    return TrainConfig.from_dict(OmegaConf.to_container(cfg.data_parallel.train, resolve=True))


def layers_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.data) / model / "layers" / "profile.json"


def whole_step_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.data) / model / "whole_step" / "profile.json"


def layer_profile(cfg: DictConfig, model: str):
    """The layers stage's `LayerProfile` of ``model``, or an error naming the command that makes it."""
    from trinity.profile.layers import LayerProfile

    return LayerProfile.load(require(layers_file(cfg, model), "layers", model))


def whole_step_profile(cfg: DictConfig, model: str):
    """The whole_step stage's `WholeStepProfile` of ``model``, or an error naming the command that makes it."""
    from trinity.profile.whole_step import WholeStepProfile

    return WholeStepProfile.load(require(whole_step_file(cfg, model), "whole_step", model))


def partition_dir(cfg: DictConfig, j: Job) -> Path:
    return Path(cfg.paths.results) / "partition" / j.model / f"{j.cluster}-{j.method}-s{j.seed}"


def measure_dir(cfg: DictConfig, j: Job) -> Path:
    """A real run of a pipeline or data-parallel method: ``results/measure/<model>/<cluster>-<method>/``."""
    return Path(cfg.paths.results) / "measure" / j.model / f"{j.cluster}-{j.method}"


def families_file(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.results) / "families" / f"{model}.json"


def validate_dir(cfg: DictConfig, model: str) -> Path:
    return Path(cfg.paths.results) / "validate" / model


def require(path: Path, stage: str, item: str) -> Path:
    """``path``, or an error saying which stage makes it, and the command that runs it for the experiment
    whose folder holds ``path``."""
    if path.exists():
        return path
    from trinity.track import project_root

    root = project_root()
    try:
        parts = Path(os.path.abspath(path)).relative_to(root).parts
    except ValueError:
        parts = ()
    if len(parts) > 2 and Path(parts[0]) == EXPERIMENTS_DIR:
        folder = EXPERIMENTS_DIR / parts[1]
        how = f"make repro EXPERIMENT={parts[1]}, or dvc repro {folder / PIPELINE_FILE}:{stage}@{item}"
    else:
        how = f"dvc repro {stage}@{item}"
    raise TrinityError(f"missing; run the {stage} stage first ({how})", source=str(path))
