"""Does a search from scratch reproduce across CPUs? The same seed under other float kernels.

torch picks its CPU kernels by the machine's instruction set (`ATEN_CPU_CAPABILITY`) and MKL its own
(`MKL_CBWR`); each sums in its own order, so the same search rounds differently on another CPU. One
search of Trinity from scratch (the default experiment's loop: 300 iterations, two racers) on a fresh
synthetic training graph is run per seed in a fresh process under each setting below, twice under the
machine's own (same machine, same kernels: must be bit for bit), and the best step times compared.
Writes ``--csv`` (one row per setting and seed) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pandas as pd

#: label -> environment (the machine's own first, twice)
SETTINGS = {
    "this machine's kernels": {},
    "this machine's kernels, again": {},
    "torch AVX2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "MKL AVX2": {"MKL_CBWR": "AVX2"},
    "torch and MKL AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
}

CHILD = """
import json, os, sys, tempfile, time, warnings
warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from trinity.cluster import load_cluster
from trinity.graph.synthetic import training_graph
from trinity.rl.search import Search, SearchConfig
seed, iterations = int(sys.argv[1]), int(sys.argv[2])
graph = training_graph(3200, batch=8, seed=23)
cfg = SearchConfig(iterations=iterations, batch=64, seed=seed, checkpoint_every=10**9, racers=2)
with tempfile.TemporaryDirectory() as tmp:
    s = Search(graph, load_cluster("p100x2"), cfg, tmp, progress=False)
    t0 = time.perf_counter()
    best = s.run()
    wall = time.perf_counter() - t0
    s.close()
print(json.dumps({"step_time_ms": best.step_time_us / 1e3, "reward": best.reward, "wall_s": wall}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--csv", default="reports/kernel_reproducibility.csv")
    args = parser.parse_args()
    for name in ("seeds", "iterations"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    machines = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    rows = []
    for label, env in SETTINGS.items():
        for seed in range(args.seeds):
            out = subprocess.run([sys.executable, "-c", CHILD, str(seed), str(args.iterations)], check=True,
                                 capture_output=True, text=True, env={**machines, **env}, timeout=1800)
            rows.append({"setting": label, "env": " ".join(f"{k}={v}" for k, v in env.items()), "seed": seed,
                         **json.loads(out.stdout.strip().splitlines()[-1])})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    own = table[table["setting"] == "this machine's kernels"].set_index("seed")["step_time_ms"]
    table["same_as_this_machines"] = [row.step_time_ms == own[row.seed] for row in table.itertuples()]
    table["vs_this_machines"] = [row.step_time_ms / own[row.seed] for row in table.itertuples()]
    table.to_csv(args.csv, index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
