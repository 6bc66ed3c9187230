"""Would a fit set with splits like the held-out ones pin the transfer model? A two-fold diagnosis.

The calibration fits its transfer model (send and receive CPU shares, link streams, co-running slowdown) to
five placers' strategies: chains that send hundreds of MB (expert, m-TOPO, m-ETF, round-robin) and METIS.
The strategies the searches find are near-gathered splits with tens of MB, and on them the simulator's
errors follow the bytes (README, *Simulator vs real*). This asks whether splits like those in the fit set
would pin the terms down. Each run's held-out split strategies at its own batch, sorted by measured step
time, are dealt into two folds. The transfer model is fitted (today's rule, `FIT_RULES[-1]`, without the
workers' held sends unless ``--held-sends``, to the validation's own measurements) to the fit placers' rows
alone, and to those plus one fold's splits. Both are judged on the other fold, at the run's own batch and
at its smaller one (which keeps its run's fit).
A diagnosis: the splits fitted are the validation's, so this says what a calibration that times such
strategies itself would gain, not what today's gets. ``--held-sends`` fits with the workers' held sends
(`send_on_request` and `sends_last`, `trinity.cluster`, which today's calibration sets) as today's rule does.

    make validation-fit-set   # -> reports/validation_fit_set.csv (on the validate stage's outputs)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from trinity.errors import run_main
from trinity.runtime.resimulate import FIT_RULES, parts, refit_run, resimulate_part
from trinity.runtime.validate import error_summary, held_out_split_rows

TODAY = FIT_RULES[-1]
FOLDS = 2


def folds(table: pd.DataFrame, k: int = FOLDS) -> list[list[str]]:
    """The measured held-out split strategies, sorted by measured step time and dealt into ``k`` folds in
    turn (each fold spans the range of step times)."""
    measured = table.dropna(subset=["real_step_ms"])
    names = measured.loc[held_out_split_rows(measured)].sort_values("real_step_ms")["strategy"].tolist()
    return [names[i::k] for i in range(k)]


def judged_on(table: pd.DataFrame, names: list[str]) -> dict:
    """`error_summary`'s held-out split figures over ``names`` alone (every other row counted as fitted)."""
    table = table.copy()
    table.loc[~table["strategy"].isin(names), "calibration_set"] = True
    s = error_summary(table)
    return {"judged": int(s["held_out_split_strategies"]), "median": s["held_out_split_step_error_median"],
            "p90": s["held_out_split_step_error_p90"], "rank": s["held_out_split_rank_correlation"]}


def fit_set_diagnosis(folder, max_send_share: float = 1.0, held_sends: bool = False) -> pd.DataFrame:
    """One row per run, batch, fold and fit set (see the module doc)."""
    # by 0.1 from 0: at 1, today's grid exactly
    rule = TODAY._replace(send_shares=tuple(np.linspace(0.0, max_send_share, round(max_send_share * 10) + 1)),
                          send_on_request=held_sends, sends_last=held_sends)
    by_run: dict[int, list] = {}
    for run, batch, part, _ in parts(folder):
        by_run.setdefault(run, []).append((batch, part))
    rows = []
    for run, run_parts in tqdm(by_run.items(), desc=Path(folder).name, unit="run"):
        top = run_parts[0][1]
        dealt = folds(pd.read_csv(top / "results.csv"))
        placers_fit, placers_cluster = refit_run(top, rule, "validation")
        placers_tables = [resimulate_part(part, placers_cluster) for _, part in run_parts]  # the same for every fold
        for k, judged in enumerate(dealt):
            fitted = tuple(n for j, fold in enumerate(dealt) if j != k for n in fold)
            splits_fit, splits_cluster = refit_run(top, rule, "validation", fitted)
            splits_tables = [resimulate_part(part, splits_cluster) for _, part in run_parts]
            for label, fit, tables in (("placers", placers_fit, placers_tables),
                                       ("placers + splits", splits_fit, splits_tables)):
                for table in tables:
                    rows.append({"model": Path(folder).name, "run": run, "batch": int(table["batch"].iloc[0]),
                                 "fold": k + 1, "fit_set": label, "fitted_splits": 0 if label == "placers" else
                                 len(fitted), **judged_on(table, judged), "send_cpu_share": fit.send_cpu_share,
                                 "receive_cpu_share": fit.receive_cpu_share, "link_streams": fit.link_streams,
                                 "corun_slowdown": fit.corun_slowdown, "fit_error": fit.error})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", default=["results/validate/inception_v3"],
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--max-send-share", type=float, default=1.0,
                   help="the sender's CPU shares tried run from 0 to this, by 0.1 (today's calibration: 1)")
    p.add_argument("--held-sends", action="store_true",
                   help="fit with the workers' held sends (send_on_request and sends_last) in the cluster")
    p.add_argument("--csv", default="reports/validation_fit_set.csv")
    args = p.parse_args(argv)
    if not 0.0 < args.max_send_share <= 5.0:
        p.error(f"--max-send-share must be in (0, 5], got {args.max_send_share}")
    table = pd.concat([fit_set_diagnosis(f, args.max_send_share, args.held_sends) for f in args.folders],
                      ignore_index=True)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    table.to_csv(args.csv, index=False)
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
