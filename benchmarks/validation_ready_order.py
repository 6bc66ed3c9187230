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

from trinity.errors import run_main
from trinity.runtime.resimulate import FIT_RULES, compare_rules_main

READY_ORDERS = ("lifo-arrivals-last", "lifo", "fifo")  #: the first is today's (`conf/validation`)


def main(argv=None) -> None:
    rules = [FIT_RULES[-1]._replace(label=order, ready_order=order) for order in READY_ORDERS]
    compare_rules_main(argv, __doc__.split("\n\n")[0], rules, "ready_order", "reports/validation_ready_order.csv")


if __name__ == "__main__":
    run_main(main)
