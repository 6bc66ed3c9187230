"""How much slower than simulated do the held-out splits run, and does the gap grow with what crosses?

Per part of each validation (run, batch): the one-worker step the op times are anchored to, the held-out split
strategies' median measured step, their median gap (measured - simulated, ms), a least-squares line of the gap
against the tensors that crossed (a fixed cost per step plus one per tensor: what a missing per-transfer cost
would show as a slope, a missing per-step cost as the intercept), the measurement's median spread, what else
the machine did, and the slowdown of both workers computing at once that the run's calibration measured and the
one it simulated. Reads the validations' `results.csv` files only: nothing is measured or fitted again.

    python benchmarks/validation_gap.py runs/validation_retime_fresh/validate/inception_v3 \
        runs/validation_requests_fresh/validate/inception_v3 --csv reports/validation_gap.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.errors import run_main
from trinity.fileio import read_json
from trinity.runtime.resimulate import parts
from trinity.runtime.validate import anchor_row, held_out_split_rows


def part_gap(table: pd.DataFrame) -> dict:
    """The gap figures of one part's `results.csv` table (see the module doc)."""
    measured = table.dropna(subset=["real_step_ms"])
    rows = measured.loc[held_out_split_rows(measured)]
    anchor = anchor_row(measured)
    gap = rows["real_step_ms"] - rows["sim_step_ms"]
    out = {"one_worker_ms": float(anchor["real_step_ms"].iloc[0]) if len(anchor) else float("nan"),
           "held_out_splits": len(rows), "split_real_median_ms": float(rows["real_step_ms"].median()),
           "gap_median_ms": float(gap.median()), "gap_fixed_ms": float("nan"), "gap_per_tensor_us": float("nan"),
           "spread_median": float(rows["real_spread"].median()) if "real_spread" in rows else float("nan")}
    if len(rows) >= 3 and rows["real_transfers"].nunique() > 1:
        slope, intercept = np.polyfit(rows["real_transfers"].to_numpy(float), gap.to_numpy(float), 1)
        out.update(gap_fixed_ms=float(intercept), gap_per_tensor_us=float(slope * 1e3))
    for key in ("steal_max", "other_cpu_max"):
        out[key] = float(measured[key].max()) if key in measured else float("nan")
    return out


def _corun(report_file: Path) -> dict:
    """The run's calibration measured both workers computing at once against one alone: its slowdown, and the
    one the simulator ran on (the measured one or a fitted one; NaN without the calibration's report)."""
    if not report_file.is_file():
        return {"corun_measured": float("nan"), "corun_simulated": float("nan")}
    report = read_json(report_file)
    measured = float(report["shared_machine"]["corun_slowdown"])
    fitted = report["transfer_fit"].get("corun_slowdown")
    return {"corun_measured": measured, "corun_simulated": measured if fitted is None else float(fitted)}


def gap_table(folders) -> pd.DataFrame:
    """One row per part of every validation folder (refused before any work if one is no validation)."""
    found = [(folder, parts(folder)) for folder in folders]
    rows = []
    for folder, folder_parts in found:
        for run, batch, part, cluster_file in folder_parts:
            table = pd.read_csv(part / "results.csv")
            batch = int(table["batch"].iloc[0]) if "batch" in table else batch
            rows.append({"validation": str(folder), "run": run, "batch": batch, **part_gap(table),
                         **_corun(cluster_file.parent / "calibration.json")})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="validation folders (results/validate/<model>)")
    p.add_argument("--csv", default="reports/validation_gap.csv")
    args = p.parse_args(argv)
    table = gap_table(args.folders)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(table.drop(columns="validation").to_string(index=False, float_format="{:.3f}".format))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
