"""A slice of the paper experiment through the SLURM path, timed against its estimate (`make paper-slice`).

    python -m trinity.slurm -- python benchmarks/paper_slice.py --model inception_v3 --out reports/paper_slice.json

The slice: one model, both clusters, every placer and search of `experiment=paper`, seeds 0 and 1, the full
1,000 iterations. The model is exported, profiled and embedded here first (timed apart); then two sweeps go
through Hydra's submitit launcher (`hydra/launcher=submitit_slurm_trinity`, one CPU per job): the placers
(seed 0, as the pipeline runs them) and the searches. It needs SLURM_CONF and MLFLOW_TRACKING_URI, which
`python -m trinity.slurm` sets. The JSON holds the measured wall time, the slice's estimate on the same slots
(trinity.estimate), the whole experiment's estimate, and that estimate scaled by measured / estimated, with
the load average sampled during the run (the machine may be shared). Beside it, a CSV of what the slice found:
each method's step time per cluster, mean and spread over the seeds (``--results-only`` rewrites it from an
earlier run's results).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.estimate import estimate
from trinity.fileio import write_json
from trinity.report.results import per_case, search_results
from trinity.stages.config import compose, experiment_dir
from trinity.stages.estimate import LAUNCHER, hours, summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "results/slice"  #: the slice's results, in the paper experiment's folder (never the committed default's)


def run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    print("+", " ".join(argv), flush=True)
    subprocess.run([sys.executable, *argv], cwd=ROOT, check=True)
    return time.perf_counter() - t0


def write_results(model: str, out: Path) -> None:
    """The slice's searches and placers per cluster: step time mean, sample std and range over seeds."""
    table = per_case(search_results(ROOT / experiment_dir("paper") / RESULTS))
    table = table[table["model"] == model]
    columns = ["cluster", "method", "seeds", "step_time_ms_mean", "step_time_ms_std", "step_time_ms_min",
               "step_time_ms_max", "search_seconds"]
    table[columns].round(3).to_csv(out, index=False)
    print(f"the slice's results -> {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception_v3")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--cache", default="runs/estimate")
    parser.add_argument("--out", default="reports/paper_slice.json")
    parser.add_argument("--results-only", action="store_true",
                        help="only rewrite the results CSV (beside --out) from an earlier run's results")
    parser.add_argument("--override", action="append", default=[],
                        help="a Hydra override for every job and the estimate (a reduced check of the path: "
                             "no extrapolation then)")
    args = parser.parse_args()
    results_csv = ROOT / Path(args.out).with_name(Path(args.out).stem + "_results.csv")
    if args.results_only:
        write_results(args.model, results_csv)
        return 0
    for var in ("SLURM_CONF", "MLFLOW_TRACKING_URI"):
        if not os.environ.get(var):
            print(f"paper_slice: error: {var} is not set; run under `python -m trinity.slurm -- ...`", file=sys.stderr)
            return 2
    slots = os.cpu_count() or 1
    seeds = [int(s) for s in args.seeds.split(",")]
    paper = compose(["experiment=paper"])
    clusters, placers, searches = list(paper.run.clusters), list(paper.run.placers), list(paper.run.searches)
    sliced = compose(["experiment=paper", f"run.models=[{args.model}]", f"run.seeds=[{args.seeds}]",
                      "run.regime.models=[]", *args.override])
    cluster_slots = int(OmegaConf.load(LAUNCHER).get("array_parallelism", 1))
    slice_estimate = summary(estimate(sliced, ROOT / args.cache), cluster_slots, slots)
    # the whole experiment's estimate scales by the slice only at the slice's own budget
    paper_estimate = None if args.override else summary(estimate(paper, ROOT / args.cache), cluster_slots, slots)
    print(f"slice estimate on this machine's SLURM ({slots} jobs at once): {hours(slice_estimate['local_slurm_s'])}",
          flush=True)

    loads: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(10):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    common = ["experiment=paper", f"job.model={args.model}", f"mlflow.experiment=paper-slice-{args.model}",
              f"paths.results={RESULTS}", "hydra/launcher=submitit_slurm_trinity", "hydra.launcher.cpus_per_task=1",
              "hydra.launcher.mem_gb=4", "hydra.launcher.timeout_min=600", *args.override]
    prepare = {stage: run([f"pipeline/{stage}.py", "experiment=paper", f"job.model={args.model}", *args.override])
               for stage in ("export", "profile", "embed")}
    placers_s = run(["pipeline/search.py", "-m", *common, f"job.cluster={','.join(clusters)}",
                     f"job.method={','.join(placers)}", "job.seed=0", "hydra.sweep.dir=multirun/slice-placers"])
    searches_s = run(["pipeline/search.py", "-m", *common, f"job.cluster={','.join(clusters)}",
                      f"job.method={','.join(searches)}", f"job.seed={args.seeds}",
                      "hydra.sweep.dir=multirun/slice-searches"])
    stop.set()
    measured = placers_s + searches_s
    ratio = measured / slice_estimate["local_slurm_s"]
    result = {
        "model": args.model, "clusters": clusters, "placers": placers, "searches": searches, "seeds": seeds,
        "iterations": int(sliced.methods.trinity.search.iterations), "slots": slots,
        "prepare_s": prepare, "placers_s": placers_s, "searches_s": searches_s, "measured_s": measured,
        "slice_jobs": slice_estimate["jobs"], "slice_estimate": slice_estimate,
        "overrides": args.override, "measured_over_estimated": ratio, "paper_estimate": paper_estimate,
        "paper_extrapolated_s": None if args.override else {
            k: paper_estimate[k] * ratio for k in ("sequential_s", "local_slurm_s", "cluster_s")},
        "load_average": {"mean": sum(loads) / len(loads) if loads else None, "max": max(loads, default=None)},
    }
    write_json(ROOT / args.out, result)
    write_results(args.model, results_csv)
    scaled = "" if args.override else f", {hours(result['paper_extrapolated_s']['local_slurm_s'])} scaled by the slice"
    whole = "" if args.override else \
        f"; the whole experiment: {hours(paper_estimate['local_slurm_s'])} estimated on this machine's SLURM{scaled}"
    print(f"slice: measured {hours(measured)} against {hours(slice_estimate['local_slurm_s'])} estimated "
          f"(x{ratio:.2f}){whole} -> {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TrinityError as exc:
        print(f"paper_slice: error: {exc}", file=sys.stderr)
        sys.exit(2)
