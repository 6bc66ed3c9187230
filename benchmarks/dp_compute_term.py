"""The data-parallel cost model's computation term: the layer profile's sum against a whole training step
measured on its own, and what running ranks two to a core adds.

The cost model prices a rank's forward and backward by the `whole_step` stage's profile at its share of the
batch / its speed (speed 0.5: two ranks time-sliced on each core); before that profile it took the layer
profile's per-sample sum x the share. For each model of the families comparison this times, with one torch
thread per process, a whole forward and backward of one rank's share (``zero_grad``, loss and all; median of
30 steps): in one process alone, and in 4 processes pinned two to a core as the local clusters run them.
Then, beside the committed real data-parallel runs, what the cost model predicts with its computation term
from the layer profile, from the whole step alone, and from the whole step with its co-run slowdown (a term
the model leaves out): measurements made here, nothing fitted to the runs.

    make dp-compute-term    # -> reports/dp_compute_term.csv (needs the layer profiles; ~10 s)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import yaml

from trinity.errors import TrinityError, run_main
from trinity.profile.whole_step import time_whole_step

STEPS = 30


def _time_steps(core: int, model: str, batch: int, share: int, out: mp.Queue) -> None:
    """One process on ``core``: median wall ms of ``share`` samples' forward and backward."""
    import torch

    from trinity.export.torch_graph import build_torch_model

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    built, _, _ = build_torch_model(model, batch)
    out.put(time_whole_step(built, share, STEPS, warmup=3) / 1e3)


def whole_step_ms(model: str, batch: int, share: int, cores: list[int], timeout_s: float = 600.0) -> list[float]:
    """Median wall ms of one share's step in each of ``len(cores)`` processes run at once, pinned to ``cores``."""
    out = mp.get_context("fork").Queue()
    procs = [mp.get_context("fork").Process(target=_time_steps, args=(c, model, batch, share, out)) for c in cores]
    for p in procs:
        p.start()
    try:
        return [out.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def main() -> None:
    from trinity.cluster import cluster_from_dict
    from trinity.data_parallel import DataParallelWork, step_cost
    from trinity.fileio import read_json
    from trinity.profile.layers import LayerProfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=Path("reports/dp_compute_term.csv"))
    args = ap.parse_args()
    if not Path("params.yaml").is_file():
        raise TrinityError("params.yaml is missing: run `make params` first", field="params.yaml")
    params = yaml.safe_load(Path("params.yaml").read_text())
    clusters = {n: cluster_from_dict(params["clusters"][n], f"clusters.{n}")
                for n in params["pipeline_parallel"]["measure"]["clusters"]}
    ranks = next(iter(clusters.values())).n_devices  # the local clusters' ranks, one share each
    rows = []
    for model in params["run"]["pipeline_parallel"]["models"]:
        path = Path(params["paths"]["data"]) / model / "layers" / "profile.json"
        if not path.is_file():
            raise TrinityError(f"{path} is not here (a DVC output): run `dvc repro layers` first", field="layers")
        work = DataParallelWork.from_layers(LayerProfile.load(path))
        share = work.batch // ranks
        alone = whole_step_ms(model, work.batch, share, [0])[0]
        together = sorted(whole_step_ms(model, work.batch, share, [r % 2 for r in range(ranks)]))
        corun = together[len(together) // 2] / (2 * alone)  # against speed 0.5: twice the time alone
        per_sample = alone * 1e3 / share
        print(f"{model}: {share} samples' whole step alone {alone:.1f} ms = {per_sample / work.us_per_sample:.3f} x "
              f"the layer profile's sum; {ranks} processes on 2 cores: {corun:.3f} x twice that")
        for name, cluster in clusters.items():
            for method in params["run"]["data_parallel"]["methods"]:
                run = Path(params["paths"]["results"]) / "measure" / model / f"{name}-{method}.metrics.json"
                if not run.is_file():
                    continue
                real = read_json(run)["real_step_ms"]
                row = {"model": model, "cluster": name, "method": method, "real_step_ms": real,
                       "profile_to_whole_step": per_sample / work.us_per_sample, "corun_slowdown": corun}
                for key, us in (("sim", work.us_per_sample), ("whole_step", per_sample),
                                ("whole_step_corun", per_sample * corun)):
                    ms = step_cost(method, cluster, replace(work, us_per_sample=us), epoch_steps=int(
                        params["pipeline_parallel"]["measure"]["steps"])).step_time_us / 1e3
                    row[f"{key}_step_ms"], row[f"{key}_error"] = ms, (ms - real) / real
                rows.append(row)
    table = pd.DataFrame(rows).round(4)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    print(table.to_string(index=False))
    errors = table[["sim_error", "whole_step_error", "whole_step_corun_error"]].abs().median()
    print(f"median |error| over {len(table)} runs: layer profile {errors.iloc[0]:.1%}, whole step alone "
          f"{errors.iloc[1]:.1%}, with its co-run slowdown {errors.iloc[2]:.1%} -> {args.csv}")


if __name__ == "__main__":
    run_main(main)
