"""How TensorFlow workers run a split step, against the simulator's two worker terms: a fresh small validation.

For each model and batch: export the model, calibrate two local workers from scratch (`calibration_for`),
then measure held-out strategies beside the fit placers, as `trinity validate` does (`validate`, interleaved
rounds): the validation placers, blends from one worker to the expert, and strategies annealed on the
calibrated cluster *without* the two terms (free control edges, oldest runnable op first): what a search
under the simulator before them picks, and where it was most wrong. Each case's folder is a validation
folder: the transfer model is fitted again under every rule of `FIT_RULES` (`refit_run`: the calibration's
own measurements of the fit placers; nothing held out is fitted) and each rule judges the held-out split
strategies: the ablation of ``control_transfers`` and ``ready_order: lifo``.

    make worker-semantics    # -> reports/worker_semantics.csv, worker_semantics_strategies.csv (~15 min here)

A case measured to the end (its folder's ``measured`` marker) is not measured again: an interrupted run
resumes at the case it was in.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pandas as pd
import yaml

from trinity.errors import TrinityError, run_main

MODELS = Path("conf/model")
CASES = ("inception_v3:8", "inception_v3:64", "nmt_2layer_s12:8", "nmt_2layer_s12:16")


def case(spec: str) -> tuple[str, int]:
    """``model:batch`` -> (model, batch), the model one of conf/model/; one clear error otherwise."""
    model, _, batch = spec.partition(":")
    if not model or not batch.isdigit() or int(batch) < 1:
        raise TrinityError(f"expected model:batch with a batch of at least 1, got {spec!r}", field="--cases")
    if not (MODELS / f"{model}.yaml").is_file():
        raise TrinityError(f"unknown model {model!r}: not in {MODELS}/", field="--cases")
    return model, int(batch)


def measure_case(model: str, batch: int, folder: Path, *, anneal_budget: int, seeds: int, rounds: int,
                 steps: int) -> None:
    """Export, calibrate and measure one case into ``folder`` (a validation folder)."""
    from trinity.export import export_model
    from trinity.placers.annealing import anneal
    from trinity.runtime.calibrate import calibration_for
    from trinity.runtime.validate import (VALIDATION_PLACERS, Candidate, blended_strategies,
                                          candidate_strategies, validate)
    from trinity.runtime.workers import open_workers

    exported = folder / "export" / "graph.json.gz"
    spec = yaml.safe_load((MODELS / f"{model}.yaml").read_text())  # the builder's name and options
    graph = export_model(spec["name"], exported, batch, **(spec.get("options") or {}))
    graph_def = (exported.parent / "graph.graphdef.pb").read_bytes()
    with open_workers(2, None, threads=1) as workers:
        cluster, calibrated, _ = calibration_for(graph, graph_def, workers, folder / "calibration", steps=5)
        before = replace(cluster, control_transfers=False, ready_order="fifo")  # the simulator before the terms
        placers = [name for name in VALIDATION_PLACERS if name != "random"]  # no seed-to-seed noise among 14
        chosen = candidate_strategies(calibrated, cluster, placers=placers, progress=False)
        by_name = {c.name: c.placement for c in chosen}
        chosen += blended_strategies(calibrated, by_name["single"], by_name["expert"], 3, "single-to-expert")
        for start in ("single", "m-etf"):
            for seed in range(seeds):
                p = anneal(calibrated, before, by_name[start], budget=anneal_budget, seed=seed).placement
                chosen.append(Candidate(f"anneal-{start}-s{seed}", "annealing", p))
        table = validate(calibrated, graph_def, workers, cluster, chosen, out_dir=folder, rounds=rounds, steps=steps,
                         warmup=1)
    table.insert(0, "batch", batch)
    table.insert(1, "run", 1)
    table.to_csv(folder / "results.csv", index=False)
    (folder / "measured").touch()


def judge(folder: Path, model: str) -> tuple[list[dict], list[dict]]:
    """(one row per rule: its fit and the held-out split figures; one row per rule and strategy: simulated
    against measured) of one measured case."""
    from trinity.runtime.resimulate import FIGURES, refitted_parts
    from trinity.runtime.validate import error_summary, held_out_split_rows

    figures, strategies = [], []
    for _, batch, rule, fit, table in refitted_parts(folder, "calibration"):
        summary = error_summary(table)
        figures.append({"model": model, "batch": batch, "rule": rule.label,
                        **{key.removeprefix("held_out_split_"): summary[key] for key in FIGURES},
                        "held_out_split": summary["held_out_split_strategies"],
                        "send_cpu_share": fit.send_cpu_share, "latency_scale": fit.latency_scale,
                        "link_streams": fit.link_streams, "fit_error": fit.error})
        single = table.loc[table["strategy"] == "single", "sim_step_ms"]
        for (_, row), held_out in zip(table.iterrows(), held_out_split_rows(table)):
            strategies.append({"model": model, "batch": batch, "rule": rule.label, "strategy": row["strategy"],
                               "source": row["source"], "held_out_split": bool(held_out),
                               "sim_step_ms": row["sim_step_ms"], "real_step_ms": row["real_step_ms"],
                               "real_q1_ms": row["real_q1_ms"], "real_q3_ms": row["real_q3_ms"],
                               "sim_vs_single": row["sim_step_ms"] / single.iloc[0] if len(single) else float("nan")})
    return figures, strategies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), help="model:batch of each case")
    p.add_argument("--work", default="data/.worker_semantics", help="one validation folder per case")
    p.add_argument("--csv", default="reports/worker_semantics.csv",
                   help="the figures per case and rule (and beside it, *_strategies.csv: every strategy)")
    p.add_argument("--anneal-budget", type=int, default=3000, help="simulator calls of each annealing")
    p.add_argument("--seeds", type=int, default=2, help="annealings from each start")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    for name in ("anneal_budget", "seeds", "rounds", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    cases = [case(spec) for spec in args.cases]
    figures, strategies = [], []
    for model, batch in cases:
        folder = Path(args.work) / f"{model}-b{batch}"
        if not (folder / "measured").is_file():
            measure_case(model, batch, folder, anneal_budget=args.anneal_budget, seeds=args.seeds,
                         rounds=args.rounds, steps=args.steps)
        rows, per_strategy = judge(folder, model)
        figures += rows
        strategies += per_strategy
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"), flush=True)
    out = Path(args.csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(figures).to_csv(out, index=False)
    pd.DataFrame(strategies).to_csv(out.with_name(f"{out.stem}_strategies.csv"), index=False)
    print(f"-> {out}, {out.with_name(f'{out.stem}_strategies.csv')}")


if __name__ == "__main__":
    run_main(main)
