"""Export and profile wall time of the paper's models: `make bench-export` (minutes).

Each model is exported at the paper's batch size and profiled here (few
steps: the point is the wall time and the graph, not tight per-op medians).
Graphs land in data/ as MODEL.json.gz and MODEL_profiled.json.gz, where
`make bench` picks up the profiled ones for the search benchmark.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

from trinity.errors import TrinityError  # noqa: E402
from trinity.export import export_model, profile_graph  # noqa: E402
from trinity.models import model_spec  # noqa: E402

PAPER_MODELS = [("inception_v3", 64), ("gnmt", 64), ("nmt_2layer", 64), ("nasnet_large", 8), ("pnasnet_large", 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="data")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--models", nargs="*", help="model[:batch] (default: the paper's five)")
    args = parser.parse_args()
    models = [(m.split(":")[0], int(m.split(":")[1]) if ":" in m else model_spec(m).default_batch)
              for m in args.models] if args.models else PAPER_MODELS
    out = Path(args.out)
    print(f"{'model':<15}{'batch':>6}{'ops':>8}{'edges':>8}{'paper ops':>10}{'paper edges':>12}"
          f"{'export s':>9}{'profile s':>10}{'step ms':>9}{'sum op/step':>12}")
    for name, batch in models:
        spec = model_spec(name)
        try:
            t0 = time.perf_counter()
            g = export_model(name, out / f"{name}.json.gz", batch)
            t1 = time.perf_counter()
            _, report = profile_graph(out / f"{name}.json.gz", out / f"{name}_profiled.json.gz",
                                      steps=args.steps, warmup=1, progress=False)
            t2 = time.perf_counter()
        except TrinityError as exc:
            print(f"{name:<15}{batch:>6}  failed: {exc}")
            continue
        paper = spec.paper_table3 or ("-", "-")
        ratio = report.get("sum_op_over_traced_step", report.get("ratio_sum_to_step", float("nan")))
        print(f"{name:<15}{batch:>6}{g.n_ops:>8}{g.n_edges:>8}{paper[0]:>10}{paper[1]:>12}{t1 - t0:>9.1f}"
              f"{t2 - t1:>10.1f}{report['step_us_median'] / 1e3:>9.1f}{ratio:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
