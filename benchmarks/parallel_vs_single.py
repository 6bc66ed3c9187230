"""Does model parallelism pay on these workers? `python benchmarks/parallel_vs_single.py GRAPH VALIDATION_DIR`

Takes the strategies a `trinity validate` run measured, picks the one that
splits the step across the workers with the best simulated step time (the
search's pick among split strategies), and measures it on N workers with one
thread each against the whole step on one worker with N threads (the same
total thread count), in interleaved rounds.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.export import read_graph_def
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.runtime.runner import Runner
from trinity.runtime.workers import LocalWorkers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("validation", help="output folder of `trinity validate`")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    path, folder = Path(args.graph), Path(args.validation)
    g = load_graph(path)
    gd = read_graph_def(path, g)
    table = pd.read_csv(folder / "results.csv").dropna(subset=["real_step_ms"])
    split = table[table["real_crossed_MB"] > 0].sort_values("sim_step_ms")
    best = split.iloc[0]
    strategy = Strategy.load(folder / "strategies" / f"{best['strategy']}.json")
    placement = strategy.to_indices(g)
    n = len(strategy.devices)
    times = {"split": [], "single": []}
    with LocalWorkers(n, threads=1) as many, LocalWorkers(1, threads=n) as one:
        runners = {"split": (Runner(g, gd, many), placement),
                   "single": (Runner(g, gd, one), np.zeros(g.n_ops, np.int64))}
        for r in range(args.rounds):
            for key in (("split", "single") if r % 2 == 0 else ("single", "split")):
                runner, p = runners[key]
                m = runner.measure(p, key, steps=args.steps, warmup=1, trace=False)
                times[key] += m.step_us
    split_ms, single_ms = (statistics.median(times[k]) / 1e3 for k in ("split", "single"))
    print(f"{g.name}: best split strategy {best['strategy']!r} (simulated {best['sim_step_ms']:.1f} ms, "
          f"{best['real_crossed_MB']:.1f} MB across) on {n} workers x 1 thread: {split_ms:.1f} ms; "
          f"the whole step on 1 worker x {n} threads: {single_ms:.1f} ms; split / single = {split_ms / single_ms:.2f}")


if __name__ == "__main__":
    main()
