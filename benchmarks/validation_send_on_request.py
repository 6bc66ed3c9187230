"""Would a calibration with `send_on_request` order the held-out splits better? Today's fit rule with and without it.

Traced steps (`make validation-op-traces`, `reports/validation_send_delays.csv`) show a worker holding tensors it
has produced until it runs out of its own work, as TensorFlow's gRPC runtime takes up a `RecvTensor` request on the
worker's one inter-op thread after the ops the worker readied itself. `send_on_request` (`trinity.cluster`) is that
term. Here every run of the committed validation is fitted again under today's rule (`trinity.runtime.resimulate
.FIT_RULES`, last) with and without it, to the fit placers' step times as the calibration measured them (nothing
held out is read by a fit); every part is simulated on each fit and judged as the validation judges (held-out
split strategies: median |error|, rank correlation). `chosen` marks the smaller fit error per run: what a
calibration that fitted the term would pick.

    make validation-send-on-request   # -> reports/validation_send_on_request.csv (about 3 min)
"""

from __future__ import annotations

import argparse

import pandas as pd

from trinity.errors import run_main
from trinity.runtime.resimulate import FIT_RULES, parts, refit_choices


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", default=["results/validate/inception_v3", "results/validate/nmt_2layer_s12"],
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--csv", default="reports/validation_send_on_request.csv")
    args = p.parse_args(argv)
    for folder in args.folders:
        parts(folder)  # a folder that is no validation is refused before any work starts
    today = FIT_RULES[-1]
    rules = [today._replace(label="today"), today._replace(label="send_on_request", send_on_request=True)]
    table = refit_choices(args.folders, rules, "semantics")
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    shown = ["model", "run", "batch", "semantics", "chosen", "fit_error", "step_error_median", "rank_correlation"]
    print(table[shown].to_string(index=False, float_format="{:.3f}".format))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
