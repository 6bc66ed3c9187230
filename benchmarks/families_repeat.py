"""Every real run of the families comparison a second time, beside the committed one: how far two runs of one
plan differ on this machine, the noise its predictions are judged against.

Each `measure` and `measure_dp` job of the default experiment (``run.pipeline_parallel.models`` x
``pipeline_parallel.measure.clusters`` x the pipeline and data-parallel methods) is run again by the stage's
own command, into a work folder instead of ``results/`` (its plans copied from the committed partition
folders, which are DVC outputs: `dvc repro partition` first). Then one row per run: the prediction, the
committed real step and the repeat's, their spread, and each one's error.

    make families-repeat    # -> reports/families_repeat.csv (~13 min here)

A run whose metrics are in the work folder is not run again: an interrupted repeat resumes where it was.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from tqdm import tqdm

from trinity.errors import TrinityError, run_main

HYDRA_ARGS = ["-cd", ".", "-cn", "params", "hydra.run.dir=.", "hydra.output_subdir=null",
              "hydra/job_logging=stdout"]


def jobs(params: dict) -> list[tuple[str, str, str, bool]]:
    """(model, cluster, method, whether it runs a pipeline plan) of every measure and measure_dp job, as
    dvc.yaml's matrices list them."""
    run, clusters = params["run"], params["pipeline_parallel"]["measure"]["clusters"]
    methods = [(x, True) for x in run["pipeline_parallel"]["methods"]] + \
        [(x, False) for x in run["data_parallel"]["methods"]]
    return [(m, c, x, plan) for m in run["pipeline_parallel"]["models"] for c in clusters for x, plan in methods]


def repeat(results: Path, work: Path, todo: list[tuple[str, str, str, bool]], timeout_s: float) -> None:
    """Run each job not yet in ``work`` by the measure stage's command, a pipeline's plan copied from ``results``."""
    plans = {(m, c, x): results / "partition" / m / f"{c}-{x}-s0" for m, c, x, has_plan in todo if has_plan}
    for plan in plans.values():  # every input checked before the first run
        if not plan.is_dir():
            raise TrinityError(f"{plan} is not here (a DVC output): run `dvc repro partition` first",
                               field="--results")
    for model, cluster, method, _ in tqdm(todo, desc="families repeat", unit="run"):
        if (work / "measure" / model / f"{cluster}-{method}.metrics.json").exists():
            continue
        if (model, cluster, method) in plans:
            plan = plans[model, cluster, method]
            shutil.copytree(plan, work / "partition" / model / plan.name, dirs_exist_ok=True)
        argv = [sys.executable, "pipeline/measure.py", *HYDRA_ARGS, f"paths.results={work}", f"job.model={model}",
                f"job.cluster={cluster}", f"job.method={method}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TrinityError(f"{model} {cluster} {method} ran past {timeout_s:.0f} s", field="--timeout") from None
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise TrinityError(f"{model} {cluster} {method} failed: {last[0]}", field="measure")


def table(results: Path, work: Path) -> pd.DataFrame:
    """The committed runs beside the repeats: one row per run that ran both times."""
    from trinity.report.families import measured

    keys = ["model", "cluster", "family", "method"]
    first, second = measured(results), measured(work)
    both = first.merge(second[keys + ["real_step_ms", "error"]], on=keys, suffixes=("", "_repeat"))
    both = both[both["real_step_ms"].notna() & both["real_step_ms_repeat"].notna()]
    mean = (both["real_step_ms"] + both["real_step_ms_repeat"]) / 2
    both["spread"] = (both["real_step_ms"] - both["real_step_ms_repeat"]).abs() / mean
    cols = keys + ["sim_step_ms", "real_step_ms", "real_step_ms_repeat", "spread", "error", "error_repeat"]
    return both[cols].round(4).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"), help="the committed runs and plans")
    ap.add_argument("--work", type=Path, default=Path("data/.families_repeat"), help="where the repeats go")
    ap.add_argument("--csv", type=Path, default=Path("reports/families_repeat.csv"))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    args = ap.parse_args()
    if not args.timeout > 0:
        raise TrinityError(f"must be > 0, got {args.timeout}", field="--timeout")
    params = Path("params.yaml")
    if not params.is_file():
        raise TrinityError("params.yaml is missing: run `make params` first", field="params.yaml")
    repeat(args.results, args.work.resolve(), jobs(yaml.safe_load(params.read_text())), args.timeout)
    out = table(args.results, args.work)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(args.csv, index=False)
    print(out.to_string(index=False))
    print(f"median spread {out['spread'].median():.1%} over {len(out)} runs; median |error| "
          f"{out['error'].abs().median():.1%} committed, {out['error_repeat'].abs().median():.1%} repeat -> {args.csv}")


if __name__ == "__main__":
    run_main(main)
