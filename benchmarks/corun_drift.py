"""Does the calibration's co-running measurement follow what a split step costs, round by round?

Fresh validations ran the held-out splits 45-65 ms a step slower than simulated at batch 8 in three runs and on
time in a fourth, while the one-worker step stayed put (`reports/validation_gap.csv`); the calibration measures the
slowdown of both workers computing at once once, before the rounds. Here, on 2 pinned local workers, each round
measures that slowdown as the calibration does (`measure_shared_machine`: the whole step on each worker alone and
on both at once), then the whole step on one worker and a placer's split: if the split's step over the one-worker
step rises and falls with the co-running slowdown across rounds, measuring it in a validation's rounds (as the op
times are anchored to the one-worker step there) is the term to build. One row per round; the printed summary gives
each column's range and the rank correlation of the split's ratio with the slowdown.

    make corun-drift   # -> reports/corun_drift.csv (~12 min at batch 64)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from tqdm import tqdm

from trinity.errors import TrinityError, run_main
from trinity.runtime.calibrate import measure_shared_machine
from trinity.runtime.runner import Runner, placed_on_two_workers
from trinity.runtime.validate import rank_correlation
from trinity.runtime.workers import LocalWorkers


def drift_summary(table: pd.DataFrame) -> dict:
    """Ranges of the co-running slowdown and of the split's step over the one-worker step across rounds, and the
    rank correlation of the two (NaN under 3 rounds)."""
    return {"rounds": len(table), "corun_min": float(table["corun_slowdown"].min()),
            "corun_max": float(table["corun_slowdown"].max()),
            "split_over_single_min": float(table["split_over_single"].min()),
            "split_over_single_max": float(table["split_over_single"].max()),
            "rank_correlation": rank_correlation(table["corun_slowdown"], table["split_over_single"])}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default="data/inception_v3/export/graph.json.gz",
                   help="an exported model (its GraphDef beside it: `dvc repro export@inception_v3`)")
    p.add_argument("--cluster", default="p100x2", help="the 2-device cluster the placer places on")
    p.add_argument("--placer", default="metis", help="the split measured")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=3, help="timed steps per run of the one-worker step and the split")
    p.add_argument("--probe-repeats", type=int, default=5, help="rounds of the co-running measurement each round")
    p.add_argument("--csv", default="reports/corun_drift.csv")
    args = p.parse_args(argv)
    for field, value in (("--rounds", args.rounds), ("--steps", args.steps), ("--probe-repeats", args.probe_repeats)):
        if value < 1:
            raise TrinityError(f"must be 1 or more, got {value}", field=field)
    graph, graph_def, placed = placed_on_two_workers(args.graph, args.cluster, [args.placer])
    split = placed[args.placer]
    single = np.zeros(graph.n_ops, dtype=np.int64)
    rows, start = [], time.perf_counter()
    with LocalWorkers(2, threads=1) as workers:
        runner = Runner(graph, graph_def, workers)
        for r in tqdm(range(args.rounds), desc="rounds", unit="round"):
            shared = measure_shared_machine(graph, graph_def, workers, repeats=args.probe_repeats,
                                            sync_repeats=2 * args.probe_repeats, progress=False)
            one = runner.measure(single, "single", steps=args.steps, warmup=2, trace=False)
            two = runner.measure(split, args.placer, steps=args.steps, warmup=2, trace=False)
            rows.append({"round": r, "at_s": time.perf_counter() - start,
                         "corun_slowdown": shared["corun_slowdown"],
                         "alone_ms": min(shared["median_us"]["A"], shared["median_us"]["B"]) / 1e3,
                         "both_ms": shared["median_us"]["AB"] / 1e3, "single_ms": one.median_us / 1e3,
                         "split_ms": two.median_us / 1e3, "split_over_single": two.median_us / one.median_us,
                         "steal_max": max(shared["steal"], one.steal[0], two.steal[0]),
                         "other_cpu_max": max(shared["other_cpu"], one.other_cpu[0], two.other_cpu[0])})
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(table.round(4).to_string(index=False))
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in drift_summary(table).items()))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
