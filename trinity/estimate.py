"""How long an experiment's placements and searches take, from costs measured here before it starts.

For each method on each graph and cluster of the experiment (``run`` and ``run.regime``), a probe runs the
method through the library at a tiny budget and times it: a placer once; a search (Trinity, Hierarchical)
for a few iterations (its per-iteration cost, the median after the first) plus its set-up (a warm start's
imitation, timed at two small step counts and scaled to the method's steps); a local search (annealing)
at two small budgets (its cost per simulator call). A job's estimate is set-up + iterations (or calls) x
that cost. Probes are cached per graph, cluster, method and code version (a digest of the `trinity`
package), so a faster search, once merged, is measured afresh.

A graph comes from the pipeline's profiled file if `dvc repro` made it, else it is exported here into the
cache (per-op times do not change how long a simulation takes much; the graph's structure does).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import median

from omegaconf import DictConfig, OmegaConf

from trinity.fileio import write_json
from trinity.graph import OpGraph, load_graph, save_graph
from trinity.stages.config import op_placement_cases

PROBE_ITERATIONS = 4  #: iterations a search probe runs (the first is set-up's)
PROBE_CALLS = (50, 300)  #: simulator-call budgets of a local search's two probes
PROBE_WARM_STEPS = (5, 20)  #: imitation steps of a warm start's two probes
PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Cost:
    """One method on one graph and cluster, as measured here."""

    setup_s: float  #: before the first iteration (warm start, placer selection), or a placer's whole run
    per_unit_s: float  #: per iteration (search) or per simulator call (local search); 0 for a placer
    units: int  #: iterations or simulator calls of one job
    process_s: float = 0.0  #: a job's own process: interpreter, imports, compiled code loaded

    @property
    def job_s(self) -> float:
        return self.process_s + self.setup_s + self.units * self.per_unit_s


@dataclass(frozen=True)
class Row:
    """Jobs of one method on one graph and cluster (one per seed; placers run once)."""

    stage: str
    model: str
    cluster: str
    method: str
    jobs: int
    cost: Cost


def code_version() -> str:
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def cases(cfg: DictConfig) -> list[tuple[str, str, str, str, int]]:
    """(stage, model, cluster, method, jobs) of every placement and search the experiment runs."""
    out = []
    for model, cluster, _, regime in op_placement_cases(cfg):
        run, stage = (cfg.run.regime, "_regime") if regime else (cfg.run, "")
        out += [(f"place{stage}", model, cluster, m, 1) for m in run.placers or []]
        out += [(f"search{stage}", model, cluster, m, len(run.seeds)) for m in run.searches or []]
    return out


def estimate(cfg: DictConfig, cache_dir: str | Path, progress: bool = True) -> list[Row]:
    """Every case of the experiment with its measured cost (probes cached in ``cache_dir``)."""
    from trinity.progress import progress as progress_bar

    cache_dir = Path(cache_dir)
    version = code_version()
    overhead_file = cache_dir / f"process-{version}.json"
    if not overhead_file.exists():
        write_json(overhead_file, {"seconds": process_overhead_s()})
    overhead = json.loads(overhead_file.read_text())["seconds"]
    rows, graphs = [], {}
    todo = cases(cfg)
    bar = progress_bar(total=len(todo), desc="measuring each method", disable=not progress)
    for stage, model, cluster_name, method, jobs in todo:
        bar.set_postfix(case=f"{method} on {model}, {cluster_name}")
        if model not in graphs:
            graphs[model] = _graph(cfg, model, cache_dir)
        graph, graph_digest = graphs[model]
        node = OmegaConf.to_container(cfg.methods[method], resolve=True)
        key = hashlib.sha256(json.dumps([version, graph_digest, OmegaConf.to_container(cfg.clusters[cluster_name],
                                         resolve=True), node, PROBE_ITERATIONS, PROBE_CALLS, PROBE_WARM_STEPS],
                                        sort_keys=True, default=str).encode()).hexdigest()[:16]
        cached = cache_dir / "probes" / f"{model}-{cluster_name}-{method}-{key}.json"
        if cached.exists():
            cost = Cost(**json.loads(cached.read_text()))
        else:
            cost = probe(cfg, graph, cluster_name, method, cache_dir)
            write_json(cached, asdict(cost))
        rows.append(Row(stage, model, cluster_name, method, jobs, replace(cost, process_s=overhead)))
        bar.update(1)
    bar.close()
    return rows


def probe(cfg: DictConfig, graph: OpGraph, cluster_name: str, method: str, cache_dir: Path) -> Cost:
    """Time ``method`` on ``graph`` at a tiny budget (see the module's docstring)."""
    from trinity.stages import config

    cluster = config.cluster(cfg, cluster_name)
    node = cfg.methods[method]
    if node.kind == "placer":
        return _probe_placer(graph, cluster, node)
    if node.kind == "local-search":
        return _probe_local_search(cfg, graph, cluster, node)
    return _probe_search(graph, cluster, config.search_config(cfg, method, 0), cache_dir)


def process_overhead_s() -> float:
    """Seconds a fresh job process spends before its work: Python, the stage's imports, the simulator's
    compiled code (numba's on-disk cache) on a one-op graph."""
    import subprocess
    import sys

    script = ("from trinity.graph import Op, OpGraph; from trinity.sim import Simulator; import numpy as np; "
              "import trinity.stages.search, trinity.rl.search, trinity.placers, mlflow; "
              "from trinity.cluster import load_cluster; "
              "Simulator(OpGraph([Op('a', 'X', 1.0, output_bytes=(4,))], []), load_cluster('p100x2'))"
              ".simulate(np.zeros(1, np.int64))")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=600)  # fills numba's cache
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True, timeout=600)
    return time.perf_counter() - t0


def _probe_placer(graph, cluster, node) -> Cost:
    from trinity.stages.search import _place

    seconds = []
    for _ in range(2):  # the first run compiles (numba), as a job's process does not: see process_overhead_s
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            _place(graph, cluster, node, _job(), Path(out))
            seconds.append(time.perf_counter() - t0)
    return Cost(seconds[-1], 0.0, 0)


def _probe_local_search(cfg, graph, cluster, node) -> Cost:
    from trinity.stages.search import _anneal

    seconds = []
    for calls in PROBE_CALLS:
        small = OmegaConf.merge(node, {"options": {"budget": calls}})
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            _anneal(cfg, graph, cluster, small, _job(), Path(out))
            seconds.append(time.perf_counter() - t0)
    per_call = max(seconds[1] - seconds[0], 0.0) / (PROBE_CALLS[1] - PROBE_CALLS[0])
    return Cost(max(seconds[0] - PROBE_CALLS[0] * per_call, 0.0), per_call, int(node.options.budget))


def _probe_search(graph, cluster, sc, cache_dir: Path) -> Cost:
    from trinity.rl.search import Search

    probes = [None] if not sc.warm_start else [min(s, sc.warm_start_steps) for s in PROBE_WARM_STEPS]
    built, per_iteration = [], []
    for i, steps in enumerate([probes[0], *probes]):  # the first, untimed, compiles what a job loads from disk
        small = replace(sc, iterations=PROBE_ITERATIONS, checkpoint_every=10**9,
                        **({"warm_start_steps": steps} if steps else {}))
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            # op features (the embed stage's work, not the search's) are computed once, in the untimed build
            search = Search(graph, cluster, small, out, feature_cache=cache_dir / "features", progress=False)
            built.append(time.perf_counter() - t0)
            search.run()
        if i == 0:
            built = []
            continue
        elapsed = [h["charts/seconds"] for h in search.history]
        per_iteration.append(median(b - a for a, b in zip(elapsed, elapsed[1:])))
        first_iteration_extra = max(elapsed[0] - per_iteration[-1], 0.0)
    per_iteration_s = median(per_iteration)
    setup = built[-1] + first_iteration_extra
    if sc.warm_start and probes[1] > probes[0]:  # scale the imitation to the method's own steps
        per_step = max(built[1] - built[0], 0.0) / (probes[1] - probes[0])
        setup += (sc.warm_start_steps - probes[1]) * per_step
    return Cost(setup, per_iteration_s, sc.iterations)


def _job():
    from trinity.stages.config import Job

    return Job("probe", "probe", "probe", 0)


def _graph(cfg: DictConfig, model: str, cache_dir: Path) -> tuple[OpGraph, str]:
    """The pipeline's profiled graph, else its exported one, else one exported here into the cache."""
    from trinity.stages import config

    for path in (config.profiled_file(cfg, model), config.graph_file(cfg, model)):
        if path.exists():
            return load_graph(path), _digest(path)
    spec = cfg.models[model]
    path = cache_dir / "graphs" / f"{model}-{_spec_digest(spec)}.json.gz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if spec.source:
            save_graph(load_graph(spec.source), path)
        elif spec.get("synthetic"):
            from trinity.graph.synthetic import layered_dag

            save_graph(layered_dag(**OmegaConf.to_container(spec.synthetic)), path)
        else:
            from trinity.export import export_model

            export_model(spec.name, path, spec.batch, **OmegaConf.to_container(spec.options))
    return load_graph(path), _digest(path)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _spec_digest(spec) -> str:
    return hashlib.sha256(json.dumps(OmegaConf.to_container(spec, resolve=True), sort_keys=True,
                                     default=str).encode()).hexdigest()[:10]


def makespan(durations: list[float], slots: int) -> float:
    """Wall time of ``durations`` on ``slots`` workers, longest first to the least loaded (LPT)."""
    loads = [0.0] * max(1, slots)
    for d in sorted(durations, reverse=True):
        loads[loads.index(min(loads))] += d
    return max(loads)


def job_durations(rows: list[Row]) -> list[float]:
    return [row.cost.job_s for row in rows for _ in range(row.jobs)]
