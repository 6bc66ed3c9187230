"""The learned list scheduler on graphs its pre-trained policy never saw: `make learned-list-table`.

Held out from `benchmarks/learned_list_train.py`'s training set: Inception-style training steps of
other seeds and sizes (2.5k, 4k, 6k ops), a layered DAG of another size (3k ops), and any graph
files given (the exported InceptionV3, Baechi's GNMT forward graph: other families), on 2 and 4
P100s. Per case and seed:

* ``zero-shot``: one greedy decode by the committed policy (no search);
* ``fine-tune``: the search from the committed policy for 10% of the default budget
  (10 iterations x 8 episodes, no warm start);
* ``annealing@fine-tune``: calibrated annealing from the best placer (by MDPE reward: where the
  search's warm start starts), read at the fine-tune's wall time;
* with ``--full``: ``search`` (the method's default: imitation of the best placer, then 100 iterations
  x 8) and ``annealing@search`` (the same annealing read at the search's wall time);
* with ``--ablation``: ``imitation-only`` (the search without updates: lr ~ 0), ``rl-only`` (from fresh
  weights, no warm start), ``select-etf`` (m-ETF's select order kept, the device learned), each at
  the search's budget.

Every placer the warm start chooses from is a row too. Writes one row per run (``--csv``), per
case and method the mean and spread over seeds against m-ETF and the best placer (``*_summary.csv``),
and that summary as the markdown table the README shows (``--csv`` with ``.md``; ``--report-only``
rewrites both from ``--csv`` without running anything).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import layered_dag, training_graph  # noqa: E402
from trinity.placers import best_by_reward, place_each  # noqa: E402
from trinity.placers.annealing import anneal  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.reward import MDPEConfig, mdpe_reward  # noqa: E402
from trinity.rl.learned_list import greedy_placement  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.rl.warm_start import WARM_START_PLACERS  # noqa: E402
from trinity.sim import Simulator  # noqa: E402

HELD_OUT = (
    ("training_graph(2500, batch=8, seed=7)", lambda: training_graph(2500, batch=8, seed=7)),
    ("training_graph(4000, batch=8, seed=11)", lambda: training_graph(4000, batch=8, seed=11)),
    ("training_graph(6000, batch=8, seed=13)", lambda: training_graph(6000, batch=8, seed=13)),
    ("layered_dag(3000, 4500, seed=5)", lambda: layered_dag(3000, 4500, seed=5)),
)
SEARCH = dict(iterations=100, batch=8, warm_start="best", warm_start_steps=200, warm_start_lr=0.01)
FINE_TUNE = dict(iterations=10, batch=8, agent={"pretrained": "default"})
ABLATION = {
    "imitation-only": dict(SEARCH, agent={"lr": 1e-12}),
    "rl-only": dict(SEARCH, warm_start=None),
    "select-etf": dict(SEARCH, agent={"select": "etf"}),
}


def search(graph, cluster, seed: int, settings: dict):
    """(best placement, wall seconds, simulator calls) of one learned-list search."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()  # the agent's setup and the warm start count
        s = Search(graph, cluster, SearchConfig(method="learned-list", seed=seed, checkpoint_every=10 ** 9,
                                                sim_threads=1, **settings), tmp, progress=False)
        best = s.run()
        wall = time.perf_counter() - t0
        s.close()
    return best.placement, wall, s.cfg.batch * s.iteration


def annealed_at(graph, cluster, start, seed: int, wall: float, sim) -> float:
    """Annealing's best step time (us) within ``wall`` seconds, from ``start``: its budget of simulator
    calls is what fits in ``wall`` at the cost per call of a 200-call probe, so it cools within it."""
    probe = anneal(graph, cluster, start, budget=200, seed=seed, simulator=sim)
    budget = max(200, int(wall * probe.calls / max(probe.seconds, 1e-9)))
    sa = anneal(graph, cluster, start, budget=budget, seed=seed, simulator=sim)
    within = [step for _, sec, step, _ in sa.curve if sec <= wall]
    return min(within) if within else sa.curve[0][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graphs", nargs="*", help="more held-out graph files")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--clusters", nargs="+", default=["p100x2", "p100x4"])
    parser.add_argument("--only", help="held-out synthetic graphs to run, by index (e.g. 0,3); default all")
    parser.add_argument("--full", action="store_true", help="also the search at the default budget vs annealing")
    parser.add_argument("--ablation", action="store_true", help="also imitation-only, rl-only, select-etf")
    parser.add_argument("--iterations", type=int, default=SEARCH["iterations"],
                        help="the budget of `search` and the ablation's runs (default: the default experiment's)")
    parser.add_argument("--csv", default="reports/learned_list_generalisation.csv")
    parser.add_argument("--resume", action="store_true", help="keep --csv's rows and skip the cases it has")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite the summary and the markdown table from --csv")
    args = parser.parse_args()
    torch.set_num_threads(1)
    held = [h for i, h in enumerate(HELD_OUT) if args.only is None or str(i) in args.only.split(",")]
    graphs = [(name, make) for name, make in held] + [(f, (lambda f=f: load_graph(f))) for f in args.graphs]
    rows = pd.read_csv(args.csv).to_dict("records") if (args.resume or args.report_only) and Path(args.csv).exists() \
        else []
    done = {r["case"] for r in rows}
    for name, make in ([] if args.report_only else graphs):
        graph = make()
        for cluster in map(load_cluster, args.clusters):
            case = f"{name} ({graph.n_ops} ops) {cluster.name}"
            if case in done:
                continue
            if graph.group_static_memory().sum() > cluster.memory.sum():
                print(f"{case}: skipped, the cluster cannot hold the graph's weights")
                continue
            sim = Simulator(graph, cluster)

            def row(method, seed, placement, seconds, calls=0):
                res = sim.simulate(placement, check=False)
                rows.append({"case": case, "graph": name, "cluster": cluster.name, "ops": graph.n_ops,
                             "method": method, "seed": seed, "step_time_ms": res.step_time_us / 1e3, "fits": res.fits,
                             "busiest_share": res.busiest_share, "seconds": seconds, "sim_calls": calls})

            for name_, placed in place_each(WARM_START_PLACERS, graph, cluster)[0].items():
                row(name_, 0, placed.placement, placed.seconds, 0)
            # annealing starts where the search's warm start does: the best placer by the MDPE reward
            _, start = best_by_reward(WARM_START_PLACERS, graph, cluster, lambda r: mdpe_reward(r, MDPEConfig()),
                                      simulator=sim)
            t0 = time.perf_counter()
            row("zero-shot", 0, greedy_placement(graph, cluster), time.perf_counter() - t0, 0)
            full = [("search", SEARCH)] if args.full else []
            runs = [("fine-tune", FINE_TUNE)] + [(m, dict(v, iterations=args.iterations)) for m, v in
                                                  full + (list(ABLATION.items()) if args.ablation else [])]
            for seed in progress(range(args.seeds), desc=case):
                for method, settings in runs:
                    placement, wall, calls = search(graph, cluster, seed, settings)
                    row(method, seed, placement, wall, calls)
                    if method in ("fine-tune", "search"):
                        sa = annealed_at(graph, cluster, start, seed, wall, sim)
                        rows.append({**rows[-1], "method": f"annealing@{method}", "step_time_ms": sa / 1e3,
                                     "busiest_share": float("nan"), "sim_calls": float("nan")})
            Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows).to_csv(args.csv, index=False)
    table = summary(pd.DataFrame(rows))
    table.to_csv(Path(args.csv).with_name(Path(args.csv).stem + "_summary.csv"), index=False)
    Path(args.csv).with_suffix(".md").write_text(markdown(table))
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per case and method (placers: only the best): mean and spread (sd) over seeds, against m-ETF
    and against the best placer."""
    out = []
    for case, part in table.groupby("case", sort=False):
        metf = float(part[part["method"] == "m-etf"]["step_time_ms"].iloc[0])
        placers = part[part["method"].isin(WARM_START_PLACERS) & part["fits"]]
        best = placers.loc[placers["step_time_ms"].idxmin()]
        for method, runs in part.groupby("method", sort=False):
            if method in WARM_START_PLACERS and method not in ("m-etf", best["method"]):
                continue
            out.append({"case": case, "method": method, "seeds": len(runs), "step_ms": runs["step_time_ms"].mean(),
                        "sd": runs["step_time_ms"].std() if len(runs) > 1 else 0.0,
                        "vs_m_etf": runs["step_time_ms"].mean() / metf,
                        "vs_best_placer": runs["step_time_ms"].mean() / best["step_time_ms"],
                        "busiest": runs["busiest_share"].mean(), "wall_s": runs["seconds"].mean()})
    return pd.DataFrame(out)


#: the summary's methods in the markdown table's column order (placers other than m-ETF: "best placer")
COLUMNS = ("zero-shot", "fine-tune", "annealing@fine-tune", "search", "annealing@search", "imitation-only",
           "rl-only", "select-etf")
HEADERS = {"zero-shot": "zero-shot", "fine-tune": "fine-tune (10 it.)", "annealing@fine-tune":
           "annealing, fine-tune's wall time", "search": "search (imitation + RL)", "annealing@search":
           "annealing, search's wall time", "imitation-only": "imitation only", "rl-only": "RL only (from scratch)",
           "select-etf": "select = m-ETF's, place learned"}
LEARNED = {"fine-tune", "search", "imitation-only", "rl-only", "select-etf"}


def case_label(case: str) -> str:
    """A case's short name: the synthetic graph's call, or the graph file's family."""
    for path, label in (("inception_v3", "InceptionV3, exported"), ("gnmt", "GNMT, Baechi's reference")):
        if path in case.split(" (")[0].lower():
            case = label + case[case.index(" ("):]
    return case.replace("training_graph", "training graph").replace(", batch=8", "").replace("_", " ")


def markdown(table: pd.DataFrame) -> str:
    """The summary as one markdown row per case: step time ms (mean +/- sd over seeds), x m-ETF, and the
    learned runs' mean wall time; the lowest mean of the row in bold. An ablation's table leaves out the
    zero-shot and fine-tune columns (the generalisation table has them)."""
    methods = [m for m in COLUMNS if m in set(table["method"])]
    if "imitation-only" in methods:
        methods = [m for m in methods if m not in ("zero-shot", "fine-tune", "annealing@fine-tune")]
    head = ["case", "best placer", "m-ETF"] + [HEADERS[m] for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, part in table.groupby("case", sort=False):
        by = {r["method"]: r for _, r in part.iterrows()}
        placers = [r for m, r in by.items() if m not in COLUMNS]
        best = min(placers, key=lambda r: r["step_ms"])
        lowest = min(r["step_ms"] for m, r in by.items() if m not in COLUMNS or m in methods)

        def cell(r, wall=False):
            text = f"{r['step_ms']:.2f}" + (f" +/- {r['sd']:.2f}" if r["seeds"] > 1 else "")
            text = f"**{text}**" if r["step_ms"] <= lowest * (1 + 1e-9) else text
            note = [f"{r['vs_m_etf']:.3f}"] + ([f"{r['wall_s']:.0f} s"] if wall else [])
            return f"{text} ({', '.join(note)})"

        cells = [case_label(case), f"{best['method']} {cell(best)}", cell(by["m-etf"])]
        cells += [cell(by[m], m in LEARNED) if m in by else "" for m in methods]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
