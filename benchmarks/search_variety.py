"""Trinity from scratch on graphs of other families than its development graphs: `make search-variety`.

(Its defaults were chosen on the development graphs, `benchmarks/search_dev.py`, and the ablation's; the
choice between groups from METIS parts and stretches of levels also read this table, so it is no longer
held out in the strict sense: the README says so.)

Synthetic training graphs (trinity.graph.synthetic.training_graph: convolution-and-gradient shaped,
measured-cost-like, seeds and sizes not used while choosing Trinity's settings) and synthetic layered
DAGs (`trinity.graph.synthetic.GRAPH_SETS`: the development set, or the fresh one with ``--fresh``), plus
any graph files given, on 2 and 4 P100s. Per case: every placer, Trinity from scratch at the
default's budget before the block-moves portfolio (300 iterations x 64, two racers: ``DEFAULT_SEARCH``,
the base every variant table here ran over; today's default is ``--iterations 660`` with `make`'s
``FIVE_RACE_660``: `make search-default-racers-660`) over 2 seeds, and
calibrated simulated annealing from one device (round-robin where one device cannot hold the graph) read
at Trinity's own wall time.
``--agent`` sets Trinity's options (a variant of the defaults). Writes one row per run (``--csv``),
prints Trinity's and annealing's step time against m-ETF's and the best placer's, with the busiest
device's share of compute.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import graph_set  # noqa: E402
from trinity.placers import place_each  # noqa: E402
from trinity.placers.annealing import anneal, best_step_within, start_placement  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.rl.defaults import TRINITY_SCRATCH_BATCH  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.sim import Simulator  # noqa: E402

PLACERS = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct")
#: the loop settings of the default before the block-moves portfolio, under ``--search`` (kept: every committed
#: variant table ran over them; today's default, conf/experiment/default.yaml, sets racers, race_share and
#: race_agents itself)
DEFAULT_SEARCH = {"racers": 2}


def graphs(files: list[str], fresh: bool = False, synthetic: bool = True):
    if synthetic:
        yield from graph_set("fresh" if fresh else "development")
    for f in files:
        yield load_graph(f)


def json_object(text: str) -> dict:
    value = json.loads(text or "{}")
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graphs", nargs="*")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--batch", type=int, default=TRINITY_SCRATCH_BATCH, help="strategies per iteration")
    parser.add_argument("--csv", default="reports/search_variety.csv")
    parser.add_argument("--only", default="", help="run the cases whose name contains this, e.g. 'layered4000'")
    parser.add_argument("--fresh", action="store_true",
                        help="synthetic graphs of new sizes and seeds instead (held out from every choice so far)")
    parser.add_argument("--files-only", action="store_true", help="the graph files given alone, no synthetic graphs")
    parser.add_argument("--agent", type=json_object, default={}, metavar="JSON",
                        help="Trinity's options for these runs (the agent: block), e.g. '{\"self_imitation\": 10}'")
    parser.add_argument("--search", type=json_object, default={}, metavar="JSON",
                        help="the search loop's settings for these runs (SearchConfig) over DEFAULT_SEARCH's, "
                             "e.g. '{\"racers\": 1}'")
    args = parser.parse_args()
    own = {"iterations", "batch", "seed", "checkpoint_every", "agent"} & args.search.keys()
    if own:  # set by their own options (or per seed): refused rather than silently clashing
        parser.error(f"--search: {', '.join(sorted(own))} cannot be set there (--iterations, --batch, --seeds, --agent)")
    if args.files_only and not args.graphs:
        parser.error("--files-only: no graph files given")
    rows = []
    for graph in graphs(args.graphs, args.fresh, synthetic=not args.files_only):
        for cluster in (load_cluster("p100x2"), load_cluster("p100x4")):
            case = f"{graph.name} ({graph.n_ops} ops) {cluster.name}"
            if args.only not in case:
                continue
            if graph.group_static_memory().sum() > cluster.memory.sum():
                print(f"{case}: skipped, the cluster cannot hold the graph's weights")
                continue
            sim = Simulator(graph, cluster)
            for placer, placed in place_each(PLACERS, graph, cluster)[0].items():  # those that cannot: left out
                res = sim.simulate(placed.placement)
                rows.append({"case": case, "method": placer, "seed": 0, "step_time_ms": res.step_time_us / 1e3,
                             "fits": res.fits, "busiest_share": res.busiest_share, "seconds": 0.0})
            _, start = start_placement("single", graph, cluster)  # annealing's start, the same for every seed
            for seed in progress(range(args.seeds), desc=case):
                with tempfile.TemporaryDirectory() as tmp:
                    cfg = SearchConfig(iterations=args.iterations, batch=args.batch, seed=seed, checkpoint_every=10**9,
                                       agent=args.agent, **{**DEFAULT_SEARCH, **args.search})
                    s = Search(graph, cluster, cfg, tmp, progress=False, feature_cache="data/.features")
                    t0 = time.perf_counter()
                    best = s.run()
                    wall = time.perf_counter() - t0
                    s.close()
                res = sim.simulate(best.placement, check=False)
                rows.append({"case": case, "method": "trinity", "seed": seed, "step_time_ms": res.step_time_us / 1e3,
                             "fits": res.fits, "busiest_share": res.busiest_share, "seconds": wall})
                per_call = max(s.sim_seconds / max(s.iteration * cfg.batch, 1), 1e-5)
                sa = anneal(graph, cluster, start, budget=max(1000, int(wall / per_call)), seed=seed, simulator=sim)
                rows.append({"case": case, "method": "annealing (same wall time)", "seed": seed,
                             "step_time_ms": best_step_within(sa.curve, wall) / 1e3, "fits": True,
                             "busiest_share": float("nan"), "seconds": wall})
            pd.DataFrame(rows).to_csv(args.csv, index=False)
    if not rows:
        parser.error(f"--only {args.only!r}: no case's name contains it")
    table = pd.DataFrame(rows)
    summary = []
    for case, part in table.groupby("case", sort=False):
        placers = part[part["method"].isin(PLACERS) & part["fits"]]
        metf = placers[placers["method"] == "m-etf"]["step_time_ms"]
        best = placers.loc[placers["step_time_ms"].idxmin()] if len(placers) else None
        for method in ("trinity", "annealing (same wall time)"):
            runs = part[part["method"] == method]
            summary.append({"case": case, "method": method, "step_ms": runs["step_time_ms"].mean(),
                            "sd": runs["step_time_ms"].std(), "vs_m_etf": runs["step_time_ms"].mean() / metf.iloc[0]
                            if len(metf) else float("nan"),
                            "best_placer": f"{best['method']} {best['step_time_ms']:.2f}" if best is not None else "",
                            "vs_best_placer": runs["step_time_ms"].mean() / best["step_time_ms"]
                            if best is not None else float("nan"),
                            "busiest": runs["busiest_share"].mean(), "wall_s": runs["seconds"].mean()})
    out = pd.DataFrame(summary)
    out.to_csv(Path(args.csv).with_name(Path(args.csv).stem + "_summary.csv"), index=False)
    print(out.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
