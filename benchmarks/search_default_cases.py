"""A variant of Trinity from scratch on the default experiment's own op-placement cases, beside its committed runs.

Reads the composed params.yaml (`make params`): the experiment's models, clusters, seeds, Trinity's settings
and the paper's regime (its model, cluster and reward tolerances), and runs Trinity from scratch as the
`search` and `search_regime` stages do (the pipeline's profiled graph and embed-stage features, the same
budget), with ``--agent`` merged over the method's own options, outside DVC: nothing of `results/` is
touched. Writes one row per case and seed with the variant's best step time, its busiest device's share of
compute, its reward (the objective the search maximised), peak memory, search seconds and (with
``policy.block_prior_learned``) the block prior's strength where the search ended, beside the
committed run's (`results/**/<cluster>-trinity-s<seed>.metrics.json`), and prints the means. ``--loop``
sets the loop under every variant (e.g. the budget an older table ran at). With no ``--agent`` it
reproduces the committed runs to the last digit (a check that it runs what the pipeline runs). E.g.
`make search-default-cases AGENT='{"num_groups": 64, ...}'`. With ``--variant LABEL=JSON`` (repeated) it
runs several variants in turn, rows labelled (`make search-default-knobs`: one knob at a time, 5 seeds, to
tell a setting's effect from the seeds'). ``--peer`` also runs the experiment's `annealing-scratch` on each case and
seed right after the search, in the same process, and reads its best step time at the search's own wall time (the
issue's goal: at or below annealing at the same wall time; the report reads the committed runs', timed in jobs of
their own).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
import yaml  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.features import OpFeatures  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.placers.annealing import best_step_within  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.reward import MDPEConfig  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.sim import Simulator  # noqa: E402
from trinity.stages.config import op_placement_cases  # noqa: E402


def cases(params: dict, seeds: int | None = None) -> list[tuple[str, str, int, dict, Path]]:
    """(model, cluster, seed, reward overrides, committed results folder) for every Trinity job of the experiment
    (``seeds``: seeds 0 to seeds - 1 instead of the experiment's)."""
    results, out = Path(params["paths"]["results"]), []
    for model, cluster, reward, regime in op_placement_cases(params):
        section = params["run"]["regime"] if regime else params["run"]
        if "trinity" in section.get("searches", []):
            folder = results / ("regime/search" if regime else "search") / model
            out += [(model, cluster, s, reward, folder) for s in (range(seeds) if seeds else section["seeds"])]
    return out


#: a variant's keys that are the search loop's (SearchConfig's), not the agent's
LOOP_KEYS = ("iterations", "racers", "race_share", "race_agents", "race_rounds")


def variant(text: str) -> tuple[str, dict, dict]:
    """``LABEL=JSON``: Trinity's agent options, and the loop's ("iterations" for another budget, "racers", ...)."""
    label, _, options = text.partition("=")
    options = json.loads(options or "{}")
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"{label}: options must be a JSON object, got {options!r}")
    return label, options, {k: options.pop(k) for k in LOOP_KEYS if k in options}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--agent", type=json.loads, default={}, metavar="JSON",
                        help="options merged over Trinity's agent: block, e.g. '{\"num_groups\": 64}'")
    parser.add_argument("--iterations", type=int, help="PPO iterations (default: the experiment's)")
    parser.add_argument("--variant", type=variant, action="append", metavar="LABEL=JSON",
                        help="instead of --agent/--iterations, one of several variants run in turn (rows labelled), "
                             "e.g. 'budget x2={\"iterations\": 200}'")
    parser.add_argument("--loop", type=json.loads, default={}, metavar="JSON",
                        help="the loop's settings under every variant's, e.g. the budget a committed table ran at: "
                             "'{\"iterations\": 100, \"racers\": 1}'")
    parser.add_argument("--seeds", type=int, help="seeds 0 to SEEDS - 1 (default: the experiment's); the committed "
                        "columns are empty for seeds the experiment did not run")
    parser.add_argument("--only", default="", help="run the cases whose name contains this, e.g. 'regime'")
    parser.add_argument("--peer", action="store_true",
                        help="annealing-scratch after each search, read at the search's wall time (same process)")
    parser.add_argument("--peer-budget", type=int, metavar="CALLS",
                        help="the peer's simulator calls (default: the experiment's annealing-scratch budget); "
                             "give it more with a longer search, or it stops before the search's wall time")
    parser.add_argument("--csv", default="reports/search_default_cases.csv")
    args = parser.parse_args()
    if args.peer_budget is not None and (args.peer_budget < 1 or not args.peer):
        parser.error(f"--peer-budget needs --peer and at least 1 call, got {args.peer_budget}")
    params = yaml.safe_load(Path(args.params).read_text())
    search = params["methods"]["trinity"]["search"]
    data = Path(params["paths"]["data"])
    variants = args.variant or [("given", args.agent, {"iterations": args.iterations} if args.iterations else {})]

    def name(model: str, cluster: str, reward: dict) -> str:
        return f"{model} {cluster}" + (" (paper's regime)" if reward else "")

    chosen = [c for c in cases(params, args.seeds) if args.only in name(c[0], c[1], c[3])]
    jobs = [(v, c) for v in variants for c in chosen]
    rows, curves = [], {}
    for (label, options, loop), (model, cluster_name, seed, reward, results) in progress(jobs,
                                                                                            desc="default cases"):
        graph = load_graph(data / model / "profile" / "graph.json.gz")
        features = OpFeatures.load(data / model / "embed" / "features.npz", graph)
        cluster = load_cluster(cluster_name)
        agent = OmegaConf.to_container(OmegaConf.merge(search["agent"], options))  # nested keys merged
        if agent.get("num_groups"):  # capped at the graph's placement units, as the default is (layered12: 12)
            agent["num_groups"] = min(agent["num_groups"], int(graph.arrays.n_groups))
        loop = {**{k: search[k] for k in LOOP_KEYS if k in search}, **args.loop, **loop}
        cfg = SearchConfig(method="trinity", batch=search["batch"], seed=seed, checkpoint_every=10**9,
                           reward=MDPEConfig(**{**params["reward"], **reward}), agent=agent, **loop)
        with tempfile.TemporaryDirectory() as tmp:
            s = Search(graph, cluster, cfg, tmp, features=features, progress=False)
            best = s.run()
            seconds = s.seconds
            # a learned block prior's strength where the search ended (`policy.block_prior_learned`)
            strength = {"block_strength": s.history[-1]["charts/block_strength"]} \
                if s.history and "charts/block_strength" in s.history[-1] else {}
            s.close()
        sim = Simulator(graph, cluster)
        res = sim.simulate(best.placement, check=False)
        if args.peer:  # one annealing run per case and seed, read at each variant's wall time
            key = (model, cluster_name, seed, json.dumps(reward, sort_keys=True))
            if key not in curves:
                curves[key] = annealing_curve(params, graph, cluster, seed, reward, sim, args.peer_budget)
            peer = {"annealing_same_wall_ms": best_step_within(curves[key], seconds) / 1e3}
        else:
            peer = {}
        committed_file = results / f"{cluster_name}-trinity-s{seed}.metrics.json"
        committed = json.loads(committed_file.read_text()) if committed_file.exists() else {}
        rows.append({**({"variant": label} if args.variant else {}), "case": name(model, cluster_name, reward),
                     "seed": seed, "step_time_ms": res.step_time_us / 1e3, "busiest_share": res.busiest_share,
                     "reward": best.reward, "peak_memory_GB": res.max_memory_bytes / 1e9,
                     "search_seconds": seconds, **strength, **peer, "committed_step_time_ms": committed.get("step_time_ms"),
                     "committed_busiest_share": committed.get("busiest_share"),
                     "committed_search_seconds": committed.get("search_seconds")})
        pd.DataFrame(rows).to_csv(args.csv, index=False)
    table = pd.DataFrame(rows)
    keys = (["variant"] if args.variant else []) + ["case"]
    summary = table.groupby(keys, sort=False).agg(
        step_ms=("step_time_ms", "mean"), sd=("step_time_ms", "std"), busiest=("busiest_share", "mean"),
        reward=("reward", "mean"),
        **({"annealing_same_wall_ms": ("annealing_same_wall_ms", "mean")} if args.peer else {}),
        seconds=("search_seconds", "mean"), committed_ms=("committed_step_time_ms", "mean"),
        committed_sd=("committed_step_time_ms", "std"), committed_busiest=("committed_busiest_share", "mean"),
        committed_seconds=("committed_search_seconds", "mean"))
    print(summary.to_string(float_format=lambda x: f"{x:.3f}"))


def annealing_curve(params: dict, graph, cluster, seed: int, reward: dict, sim, budget: int | None = None) -> list:
    """The experiment's annealing-scratch, seed ``seed`` (``budget`` calls, default its own): its (calls, seconds,
    best step time us, best reward)."""
    from trinity.stages.search import run_annealing

    options = dict(params["methods"]["annealing-scratch"]["options"])
    options["budget"] = budget or options["budget"]
    reward_cfg = MDPEConfig(**{**params["reward"], **reward})
    return run_annealing(options, graph, cluster, seed=seed, reward_cfg=reward_cfg, simulator=sim)[1].curve


if __name__ == "__main__":
    main()
