"""What each of the simulator's cluster terms, set otherwise, would do to a committed validation.

Every run's calibrated cluster with one term changed (the CPU share of a transfer, the transfers a sender
carries at once, the co-running slowdown, the step synchronisation, the link latency, the ready order, control
edges sent or not), every part of the validation simulated again on it (`resimulate_part`: op times anchored
to the part's own rounds) and judged as the validation judges: the held-out split strategies' median |error|
and rank correlation, and the mean |error| of the fit placers' strategies the calibration fits to (the
validation's own measurements of them). A term that lifts a part's rank only where it raises the fit set's
error is one the calibration cannot choose: the data that says a term is missing, not mis-set.

    make validation-what-if   # -> reports/validation_what_if.csv (30 s, on the validate stage's outputs)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from trinity.cluster import Cluster, load_cluster
from trinity.errors import run_main
from trinity.runtime.resimulate import COMMITTED_VALIDATIONS, parts, resimulate_part
from trinity.runtime.validate import error_summary, fit_set_rows

#: (name, the change to a calibrated cluster): each one term away from the calibration's own
VARIANTS = {
    "calibrated": {},
    "send_cpu_share 0": {"send_cpu_share": 0.0},
    "send_cpu_share 0.2": {"send_cpu_share": 0.2},
    "send_cpu_share 0.6": {"send_cpu_share": 0.6},
    "send_cpu_share 1": {"send_cpu_share": 1.0},
    "link_streams 1": {"link_streams": 1},
    "link_streams 8": {"link_streams": 8},
    "corun_slowdown 0": {"corun_slowdown": 0.0},
    "corun_slowdown x2": {"corun_slowdown": "x2"},
    "corun_slowdown x5": {"corun_slowdown": "x5"},
    "step_sync_us +1000": {"step_sync_us": "+1000"},
    "latency x0.5": {"latency": "x0.5"},
    "latency x2": {"latency": "x2"},
    "ready_order fifo": {"ready_order": "fifo"},
    "ready_order lifo": {"ready_order": "lifo"},  # a received tensor's readers on top, as before lifo-arrivals-last
    "control_transfers off": {"control_transfers": False},
    "latency_overlaps": {"latency_overlaps": True},  # a link held for the bytes alone, latencies in flight at once
    # a worker holds the tensors it sends (traced steps: reports/validation_send_delays.csv; benchmarks/validation_sends.py)
    "send_on_request": {"send_on_request": True},  # until it takes up the receiver's request, after its own work
    "sends_last": {"sends_last": True},  # serialised after all the work the sender has ready
    "send_on_request + sends_last": {"send_on_request": True, "sends_last": True},
}


def changed(cluster: Cluster, change: dict) -> Cluster:
    """``cluster`` with each field of ``change`` set: a value, "xK" (times K) or "+K" (plus K)."""
    fields = {}
    for key, value in change.items():
        old = getattr(cluster, key)
        if isinstance(value, str) and not isinstance(old, str):  # "xK" or "+K" on a number
            factor, offset = (float(value[1:]), 0.0) if value[0] == "x" else (1.0, float(value[1:]))
            value = np.asarray(old) * factor + offset if isinstance(old, np.ndarray) else old * factor + offset
        fields[key] = value
    return replace(cluster, **fields)


def fit_set_error(table: pd.DataFrame) -> float:
    """Mean |step error| of the rows the calibration fits to (`fit_set_rows`: not the one-worker anchor, zero
    by construction)."""
    return float(table.loc[fit_set_rows(table), "step_error"].abs().mean())


def what_if(folders, variants=VARIANTS) -> pd.DataFrame:
    """One row per validation folder, run, batch and variant (see the module doc)."""
    jobs = [(Path(folder), run, batch, part, cluster_file) for folder in folders
            for run, batch, part, cluster_file in parts(folder)]
    rows = []
    for folder, run, batch, part, cluster_file in tqdm(jobs, desc="parts", unit="part"):
        cluster = load_cluster(cluster_file)
        for name, change in variants.items():
            table = resimulate_part(part, changed(cluster, change))
            summary = error_summary(table)
            rows.append({"model": folder.name, "folder": str(folder), "run": run, "batch": int(table["batch"].iloc[0]),
                         "variant": name, "change": json.dumps(change),
                         "step_error_median": summary["held_out_split_step_error_median"],
                         "rank_correlation": summary["held_out_split_rank_correlation"],
                         "fit_set_error": fit_set_error(table)})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", default=list(COMMITTED_VALIDATIONS),
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--csv", default="reports/validation_what_if.csv")
    args = p.parse_args(argv)
    for folder in args.folders:
        parts(folder)  # a folder that is no validation is refused before any work starts
    table = what_if(args.folders)
    table.to_csv(args.csv, index=False)
    wide = table.assign(cell=[f"{m:.1%}/{r:.2f}/{f:.1%}" for m, r, f in
                              zip(table["step_error_median"], table["rank_correlation"], table["fit_set_error"])])
    wide = wide.pivot_table(index="variant", columns=["folder", "batch", "run"], values="cell", aggfunc="first",
                            sort=False)
    pd.set_option("display.width", 250)
    print("held-out split median |error| / rank correlation / fit set's mean |error|")
    print(wide.to_string())
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
