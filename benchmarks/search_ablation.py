"""Why Trinity from scratch sat uniform and then collapsed, change by change: `make ablation`.

Each variant adds one change to the one before, from the paper's Trinity as this project first ran
it (sequential seq2seq decoder, uniform start, Adam 1e-3, batch 8) to the previous defaults (advantages
normalised within the batch, then self-imitation of the best strategy sampled once the policy agrees
with it on 97% of the units, then 64 strategies per iteration, then 128 groups instead of 256 to pay
for them), then the variants not kept, each on top of the locality prior, then the ones on top of the
previous default (a depth-first order; gate `mode`) and on top of gate `mode` (free logit tables,
exploration: with both, today's default); every
variant runs the default experiment's budget (100 iterations) from scratch, over 5 seeds, on each
case. Writes one row per run (``--csv``) and prints mean +/- standard deviation of the best step
time per case and variant, beside the best placer's, with the share of compute on the busiest
device (a collapse onto one device shows as ~1.00).
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

from trinity.cluster import load_cluster  # noqa: E402
from trinity.features import OpFeatures  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.placers import place_each  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.sim import Simulator  # noqa: E402

#: what each row leaves off or sets, written out in full so a row means the same whatever the defaults are
OFF = {"num_groups": 256, "normalize_advantages": False, "self_imitation": 0.0, "self_imitation_agreement": None,
       "self_imitation_gate": "elite", "table_lr": None, "explore": 0.0}
PAPER = {**OFF, "lr": 1e-3, "policy": {"decoder": "sequential", "topo_prior": 0.0, "block_prior": 0.0,
                                       "unit_logits": False, "group_logits": False}}
LOCALITY = {**OFF, "lr": 1e-2, "policy": {"decoder": "parallel", "topo_prior": 1.0, "locality_order": "breadth",
                                          "block_prior": 0.0, "unit_logits": False, "group_logits": False}}
BLOCK = {**LOCALITY, "policy": {**LOCALITY["policy"], "block_prior": 3.0}}
NORMALISED = {**LOCALITY, "normalize_advantages": True}
IMITATION = {**NORMALISED, "self_imitation": 10.0, "self_imitation_agreement": 0.97}
PREVIOUS_DEFAULT = {**IMITATION, "num_groups": 128}
MODE = {**PREVIOUS_DEFAULT, "self_imitation_gate": "mode"}
TABLES = {**MODE, "table_lr": 0.1, "policy": {**PREVIOUS_DEFAULT["policy"], "unit_logits": True, "group_logits": True}}
#: (name, batch, agent options): the chain to the previous default, then the variants not kept, then today's
VARIANTS = [
    ("paper (sequential decoder, lr 1e-3)", 8, PAPER),
    ("+ one-pass decoder", 8, {**PAPER, "policy": {**PAPER["policy"], "decoder": "parallel"}}),
    ("+ lr 1e-2", 8, {**PAPER, "lr": 1e-2, "policy": {**PAPER["policy"], "decoder": "parallel"}}),
    ("+ locality prior on groups", 8, LOCALITY),
    ("+ normalised advantages", 8, NORMALISED),
    ("+ self-imitation at 97% agreement", 8, IMITATION),
    ("+ batch 64", 64, IMITATION),
    ("+ 128 groups (the previous default)", 64, PREVIOUS_DEFAULT),
    # not kept, each on top of the locality prior's row
    ("+ block prior on devices", 8, BLOCK),
    ("+ batch 32", 32, BLOCK),
    ("locality prior + self-imitation x10", 8, {**LOCALITY, "self_imitation": 10.0}),
    ("locality prior + self-imitation x10 at 90% agreement", 8,
     {**LOCALITY, "self_imitation": 10.0, "self_imitation_agreement": 0.9}),
    # ... and on top of the previous default
    ("previous default, stretches of a depth-first order", 64,
     {**PREVIOUS_DEFAULT, "policy": {**PREVIOUS_DEFAULT["policy"], "locality_order": "depth"}}),
    ("previous default, self-imitation gated on the policy's own likeliest devices", 64, MODE),
    # ... and on top of that gate (row 13): what lets a settled policy climb
    ("gate mode + free logit tables at rate 0.1", 64, TABLES),
    ("gate mode + 8 units explored per sample", 64, {**MODE, "explore": 8.0}),
    ("gate mode + free tables + 8 units explored (the default until METIS groups)", 64, {**TABLES, "explore": 8.0}),
    ("gate mode + free tables at rate 0.3 + 3 units explored (second try)", 64,
     {**TABLES, "table_lr": 0.3, "explore": 3.0}),
    # ... and on top of row 16: groups that start as min-cut parts, not stretches (today's default)
    ("+ 64 groups from METIS parts, prior 3 (the default)", 64,
     {**TABLES, "explore": 8.0, "num_groups": 64,
      "policy": {**TABLES["policy"], "locality_order": "metis", "topo_prior": 3.0}}),
]
PLACERS = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct")


def cases(args) -> list[tuple[str, object, object, object]]:
    out = []
    for spec in args.case:
        path, cluster = spec.rsplit(":", 1)
        graph = load_graph(path)
        features = None
        feature_file = Path(path).parent.parent / "embed" / "features.npz"
        if feature_file.exists():  # the pipeline's embed stage output beside data/<model>/profile/
            features = OpFeatures.load(feature_file, graph)
        out.append((f"{graph.name} {cluster}", graph, load_cluster(cluster), features))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", action="append", required=True, metavar="GRAPH:CLUSTER")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--csv", default="reports/search_ablation.csv")
    parser.add_argument("--only", type=lambda x: [int(i) for i in x.split(",")], default=None, metavar="I,J",
                        help="run only these rows (0-based positions in VARIANTS), e.g. to compare two in one run")
    args = parser.parse_args()
    if args.only and not all(0 <= i < len(VARIANTS) for i in args.only):
        parser.error(f"--only: rows are 0 to {len(VARIANTS) - 1}")
    rows = []
    done = pd.read_csv(args.csv) if Path(args.csv).exists() else pd.DataFrame()
    loaded = cases(args)
    for name, graph, cluster, _ in loaded:
        sim = Simulator(graph, cluster)
        for placer, placed in place_each(PLACERS, graph, cluster)[0].items():  # placers that cannot place it: left out
            res = sim.simulate(placed.placement)
            rows.append({"case": name, "variant": placer, "seed": 0, "step_time_ms": res.step_time_us / 1e3,
                         "busiest_share": res.busiest_share, "seconds": 0.0, "kind": "placer"})
    # the cheap variants first, the paper's sequential decoder last: an ablation cut short has every change
    order = [VARIANTS[i] for i in args.only] if args.only else VARIANTS[1:] + VARIANTS[:1]
    jobs = [(v, s, c) for v in order for c in loaded for s in range(args.seeds)]
    for (variant, batch, agent), seed, (name, graph, cluster, features) in progress(jobs, desc="ablation"):
        if len(done):  # resume: a run already in the CSV is kept
            prior = done[(done["case"] == name) & (done["variant"] == variant) & (done["seed"] == seed)]
            if len(prior):
                rows.append(prior.iloc[0].to_dict())
                continue
        with tempfile.TemporaryDirectory() as tmp:
            cfg = SearchConfig(method="trinity", iterations=args.iterations, batch=batch, seed=seed,
                               checkpoint_every=10**9, agent=agent)
            s = Search(graph, cluster, cfg, tmp, features=features, progress=False,
                       feature_cache="data/.features")  # node2vec once per graph
            t0 = time.perf_counter()
            best = s.run()
            s.close()
        res = Simulator(graph, cluster).simulate(best.placement)
        rows.append({"case": name, "variant": variant, "seed": seed, "step_time_ms": res.step_time_us / 1e3,
                     "busiest_share": res.busiest_share, "seconds": time.perf_counter() - t0, "kind": "trinity"})
        pd.DataFrame(rows).to_csv(args.csv, index=False)  # after every run: an interrupted ablation resumes
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    summary = (table.groupby(["case", "kind", "variant"], sort=True)
               .agg(step_ms=("step_time_ms", "mean"), sd=("step_time_ms", "std"), busiest=("busiest_share", "mean"),
                    seconds=("seconds", "mean"), seeds=("seed", "count")).reset_index())
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    plot(table, Path(args.csv).with_suffix(".png"), args.iterations)


def plot(table: pd.DataFrame, path: Path, iterations: int) -> None:
    """One panel per case: each variant's mean best step time (error bars: std over seeds; the seed count
    beside it), the best placer as a dashed line; a variant whose mean busiest share is >= 95% hollow."""
    from trinity.plots import _save, plt

    cases_ = list(dict.fromkeys(table["case"]))
    fig, axes = plt.subplots(1, len(cases_), figsize=(5.2 * len(cases_), 4.8), squeeze=False)
    names = [v[0] for v in VARIANTS]
    for ax, case in zip(axes[0], cases_):
        part = table[table["case"] == case]
        placers = part[part["kind"] == "placer"]
        runs = part[part["kind"] == "trinity"]
        for i, name in enumerate(names):
            seeds = runs[runs["variant"] == name]
            if not len(seeds):
                continue
            collapsed = seeds["busiest_share"].mean() >= 0.95
            mean = seeds["step_time_ms"].mean()
            ax.errorbar(i, mean, yerr=seeds["step_time_ms"].std() if len(seeds) > 1 else None, fmt="o", ms=8,
                        color=plt.cm.tab10(i), mfc="none" if collapsed else plt.cm.tab10(i), capsize=4)
            ax.annotate(f"n={len(seeds)}", (i, mean), xytext=(7, -3), textcoords="offset points", fontsize=7)
        if len(placers):
            best = placers.loc[placers["step_time_ms"].idxmin()]
            ax.axhline(best["step_time_ms"], color="black", ls="--", lw=1, label=f"best placer ({best['variant']})")
            ax.legend(fontsize=7, loc="upper right")
        ax.set_xticks(range(len(names)), [f"{i}" for i in range(len(names))])
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.set_xlabel("variant")
        ax.set_title(case, fontsize=9)
        ax.set_ylabel("best simulated step time (ms)")
    fig.text(0.01, 0.01, "variants: " + "; ".join(f"{i} {n}" for i, n in enumerate(names)) +
             f". Hollow: >=95% of compute on one device. {iterations} iterations from scratch, mean +/- std "
             "over seeds.", fontsize=7, wrap=True)
    fig.suptitle("Trinity from scratch, change by change")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    _save(fig, path)


if __name__ == "__main__":
    main()
