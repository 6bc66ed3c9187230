"""Two transfer terms the calibration lacks, each fitted with today's rule: overlapping latencies, a fixed CPU cost.

`latency_overlaps` (`trinity.cluster`) holds a stream for a transfer's bytes alone, its latency waited out in
flight; `transfer_cpu_us` adds a fixed cost per transfer to what the processors' CPU shares are of. The
calibration sets neither. Here every run of the committed validation is fitted again with today's rule (the
last of `trinity.runtime.resimulate.FIT_RULES`) on its calibrated cluster with each setting of the two terms
(a view of the folder whose cluster files set them; every other file is the validation's own), to the fit
placers' step times as the calibration measured them: nothing held out is read by a fit. Every part is
simulated on each fit, and the setting with the smallest fit-set error is marked `chosen`: what a calibration
that also fitted the terms would pick, judged on the held-out split strategies.

    make validation-transfer-terms   # -> reports/validation_transfer_terms.csv (about 35 min)
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from trinity.errors import TrinityError, run_main
from trinity.fileio import read_yaml, write_yaml
from trinity.runtime.resimulate import COMMITTED_VALIDATIONS, FIT_RULES, parts, refit

#: (latency_overlaps, transfer_cpu_us) settings tried; the first is today's calibration
SETTINGS = ((False, 0.0), (True, 0.0), (False, 100.0), *((True, us) for us in (50.0, 100.0, 150.0, 200.0)))


def with_terms(src: Path, dst: Path, terms: dict) -> Path:
    """A view of validation folder ``src`` at ``dst`` whose calibrated cluster files (each run's
    calibration/cluster.yaml) also set ``terms``; every other file a link to the validation's own."""
    dst.mkdir(parents=True)
    for entry in sorted(src.iterdir()):
        if entry.is_dir() and (entry.name == "calibration" or re.fullmatch(r"run\d+", entry.name)):
            with_terms(entry, dst / entry.name, terms)
        elif entry.name == "cluster.yaml" and src.name == "calibration":
            write_yaml(dst / entry.name, {**read_yaml(entry), **terms})
        else:
            (dst / entry.name).symlink_to(entry.resolve())
    return dst


def parse_setting(text: str) -> tuple[bool, float]:
    """``OVERLAPS:US`` (e.g. ``true:100``) as (latency_overlaps, transfer_cpu_us); anything else one line."""
    flag, _, us = text.partition(":")
    try:
        cost = float(us)
    except ValueError:
        cost = -1.0
    if flag.lower() not in ("true", "false") or not (math.isfinite(cost) and cost >= 0.0):
        raise TrinityError(f"{text!r} is not OVERLAPS:US (true or false, then microseconds >= 0, e.g. true:100)",
                           field="--settings")
    return flag.lower() == "true", cost


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", default=list(COMMITTED_VALIDATIONS),
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--settings", nargs="*", metavar="OVERLAPS:US",
                   help="settings to try instead of SETTINGS, e.g. false:0 true:100 (today's first)")
    p.add_argument("--csv", default="reports/validation_transfer_terms.csv")
    args = p.parse_args(argv)
    settings = SETTINGS if args.settings is None else [parse_setting(s) for s in args.settings]
    for folder in args.folders:
        parts(folder)  # a folder that is no validation is refused before the first refit, not half an hour in
    today = FIT_RULES[-1]
    tables = []
    jobs = [(Path(folder), overlaps, us) for folder in args.folders for overlaps, us in settings]
    with tempfile.TemporaryDirectory() as scratch:
        for i, (folder, overlaps, us) in enumerate(tqdm(jobs, desc="refits", unit="setting")):
            view = with_terms(folder, Path(scratch) / str(i) / folder.name,
                              {"latency_overlaps": overlaps, "transfer_cpu_us": us})
            fits, figures = refit(view, "calibration", [today])
            tables.append(figures.merge(fits, on=["run", "rule"]).drop(columns="rule")
                          .assign(model=folder.name, latency_overlaps=overlaps, transfer_cpu_us=us))
    table = pd.concat(tables, ignore_index=True)
    table["chosen"] = table["fit_error"] == table.groupby(["model", "run"])["fit_error"].transform("min")
    first = ["model", "run", "batch", "latency_overlaps", "transfer_cpu_us", "chosen", "fit_error"]
    table[first + [c for c in table.columns if c not in first]].to_csv(args.csv, index=False)
    # per model, one line per setting as the README lays it out: each run's fit-set error, then each part's
    # (run/batch) held-out rank and median
    pd.set_option("display.width", 250)
    for model, rows in table.groupby("model", sort=False):
        wide = {}
        for (overlaps, us), part in rows.groupby(["latency_overlaps", "transfer_cpu_us"], sort=False):
            line = {f"fit {run}": float(fit) for run, fit in part.groupby("run")["fit_error"].first().items()}
            for _, r in part.iterrows():
                line[f"rank {r['run']}/{r['batch']}"] = r["rank_correlation"]
            line.update({f"median {r['run']}/{r['batch']}": r["step_error_median"] for _, r in part.iterrows()})
            wide[("overlapping" if overlaps else "serial") + f" + {us:g} us"] = line
        print(model)
        print(pd.DataFrame(wide).T.to_string(float_format="{:.3f}".format))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
