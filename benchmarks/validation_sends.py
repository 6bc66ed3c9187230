"""Does a calibration whose workers hold the tensors they send order the held-out splits better? Today's fit rule
(which sets both terms) against the rule before them, and each term alone.

Traced steps (`make validation-op-traces`, `reports/validation_send_delays.csv`) show a worker holding most
tensors it has produced until it runs no op of its own: at a step's start-up until it has taken up the other
worker's request for them (`send_on_request` in `trinity.cluster`: TensorFlow's gRPC runtime takes a `RecvTensor`
call up on the worker's one inter-op thread after the work the worker readied itself), and throughout the step
(`sends_last`: the sender serialises a tensor with bytes after all the work it has ready). Here every run of the
committed validation is fitted again under today's rule (`trinity.runtime.resimulate.FIT_RULES`, last) with
neither term (the rule before it), each and both (today's), to the fit placers' step times as the calibration
measured them (nothing held out is read by a fit); every part is simulated on each fit and judged as the
validation judges (held-out split strategies: median |error|, rank correlation). `chosen` marks the smallest
fit error per run: what a calibration that fitted the terms would pick.

    make validation-sends   # -> reports/validation_sends.csv (about 5 min)
"""

from __future__ import annotations

from trinity.errors import run_main
from trinity.runtime.resimulate import FIT_RULES, compare_rules_main

def main(argv=None) -> None:
    # the rule before the terms (today's has both): each term alone, then both
    before = FIT_RULES[-1]._replace(send_on_request=False, sends_last=False)
    rules = [before._replace(label="neither"), before._replace(label="send_on_request", send_on_request=True),
             before._replace(label="sends_last", sends_last=True),
             before._replace(label="both", send_on_request=True, sends_last=True)]
    compare_rules_main(argv, __doc__.split("\n\n")[0], rules, "semantics", "reports/validation_sends.csv")


if __name__ == "__main__":
    run_main(main)
