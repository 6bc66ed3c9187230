"""Would fitting the ready order at calibration help? Today's fit rule under each ready order, each with its own fit.

The calibration fixes the order a worker takes its runnable ops in (`ready_order`, the last rule of
`trinity.runtime.resimulate.FIT_RULES`) and fits the CPU shares, the streams and the co-running slowdown
under it. Here every run of the committed validation is fitted again under each order (to the fit placers'
step times as the calibration measured them: nothing held out is read by a fit), every part simulated on
that fit, and the order with the smallest fit-set error marked `chosen`: what a calibration that also fitted
the order would pick, judged on the held-out split strategies.

    make validation-ready-order   # -> reports/validation_ready_order.csv (about 6 min)
"""

from __future__ import annotations

import argparse

import pandas as pd

from trinity.errors import run_main
from trinity.runtime.resimulate import COMMITTED_VALIDATIONS, FIT_RULES, refit_choices

READY_ORDERS = ("lifo-arrivals-last", "lifo", "fifo")  #: the first is today's (`conf/validation`)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", default=list(COMMITTED_VALIDATIONS),
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--csv", default="reports/validation_ready_order.csv")
    args = p.parse_args(argv)
    today = FIT_RULES[-1]
    table = refit_choices(args.folders, [today._replace(label=order, ready_order=order) for order in READY_ORDERS],
                          "ready_order")
    first = ["model", "run", "batch", "ready_order", "chosen", "fit_error"]
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(table[first + ["step_error_median", "rank_correlation"]].to_string(index=False, float_format="{:.3f}".format))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
