"""Does a calibration that charges the receiving worker for each request it issues order the held-out splits
better? Today's fit rule against the same rule with the request's cost (`request_cpu_us` in `trinity.cluster`)
fitted with the rest.

Timed stamps at each worker's step start (`make step-start`, `reports/step_start_summary.csv`) put a split's later
worker 17-20 us per tensor crossing into its step: a `_Recv` is an op on the worker's one inter-op thread, which
creates and starts a `RecvTensor` call, and the simulator issued requests in no time. The calibration's fit set
(expert, m-TOPO, round-robin) receives 800-1,000 tensors a worker at InceptionV3's batch 8, the held-out splits a
few dozen to a few hundred, so a cost the fit lacks is absorbed by the shares it fits. Here every run of a
validation is fitted again under today's rule (`trinity.runtime.resimulate.FIT_RULES`, last) and under it with
`FITTED_REQUEST_CPU_US` tried, to the fit placers' step times as the calibration measured them (nothing held out is
read by a fit); every part is simulated on each fit and judged as the validation judges (held-out split
strategies: median |error|, rank correlation). `chosen` marks the smaller fit error per run: what a calibration
that fitted the cost would pick.

    make validation-requests   # -> reports/validation_requests.csv
"""

from __future__ import annotations

from trinity.errors import run_main
from trinity.runtime.calibrate import FITTED_REQUEST_CPU_US
from trinity.runtime.resimulate import FIT_RULES, compare_rules_main

def main(argv=None) -> None:
    today = FIT_RULES[-1]
    rules = [today._replace(label="free", request_costs=(0.0,)),
             today._replace(label="fitted", request_costs=FITTED_REQUEST_CPU_US)]
    compare_rules_main(argv, __doc__.split("\n\n")[0], rules, "requests", "reports/validation_requests.csv",
                       shown=("request_cpu_us", "send_cpu_share", "receive_cpu_share", "link_streams",
                              "corun_slowdown"))


if __name__ == "__main__":
    run_main(main)
