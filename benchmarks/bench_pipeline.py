"""Pipeline-parallel benchmark (`make bench`): real step times of TAPP's, PipeDream's and an even
split's plans and of BSP data parallelism, on 4 local torch.distributed processes made heterogeneous
by a measured slowdown (``--slowdown``: rank of device i sleeps (f - 1) x its compute time), each
with the cost model's prediction beside it, as ratios against data parallelism measured in the same
run; and the time TAPP's search and PipeDream's dynamic program take.

Methods run in a different order each round (``--rounds``) and medians over rounds are printed, since
step times on this shared 2-core machine drift between runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="transformer_lm12")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"))
    ap.add_argument("--slowdown", default="1,1,2,2")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()

    from trinity.pipeline_parallel import (even_split, local_cluster, measure, measure_data_parallel,
                                           pipedream_partition, predict, predict_data_parallel, tapp_search)
    from trinity.profile.layers import profile_layers

    slowdown = [float(f) for f in args.slowdown.split(",")]
    cluster = local_cluster(slowdown)
    t0 = time.perf_counter()
    profile = profile_layers(args.model, args.batch, steps=5, warmup=1)
    profile_s = time.perf_counter() - t0
    m, sch = args.micro_batches, args.schedule
    t0 = time.perf_counter()
    pipedream = pipedream_partition(profile, cluster, micro_batches=m, schedule=sch)
    pipedream_s = time.perf_counter() - t0
    tapp = tapp_search(profile, cluster, micro_batches=m, schedule=sch)
    plans = {"tapp": tapp.plan, "pipedream": pipedream,
             "even": even_split(profile, cluster, micro_batches=m, schedule=sch)}
    predicted = {k: predict(p, profile, cluster) for k, p in plans.items()}
    predicted["dp"] = predict_data_parallel(profile, cluster)
    measured: dict[str, list[dict]] = {k: [] for k in predicted}
    methods = list(predicted)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for method in methods[r % len(methods):] + methods[:r % len(methods)]:
                out = Path(tmp) / f"{method}{r}"
                common = dict(steps=args.steps, warmup=args.warmup, slowdown=slowdown, timeout_s=args.timeout,
                              out_dir=out)
                if method == "dp":
                    res = measure_data_parallel(args.model, args.batch, **common)
                else:
                    res = measure(plans[method], args.model, args.batch, **common)
                measured[method].append(res)

    def med(method: str, key: str) -> float:
        return statistics.median(r[key] for r in measured[method])

    names = [l.name for l in profile.layers]
    print(f"pipeline parallelism: {args.model} (batch {args.batch}, {profile.n_layers} layers), "
          f"{len(slowdown)} local gloo processes, slowdown {args.slowdown}, {m} micro-batches, {sch}, "
          f"{args.steps} steps after {args.warmup}, {args.rounds} round(s)")
    dp_real, dp_pred = med("dp", "step_time_us"), predicted["dp"].step_time_us
    print(f"{'method':10} {'measured ms':>11} {'vs dp':>6} {'predicted ms':>12} {'vs dp':>6} {'error':>6} "
          f"{'idle share':>10} {'pred comm':>9}  plan")
    errors = []
    for method in methods:
        real, pred = med(method, "step_time_us"), predicted[method].step_time_us
        errors.append(abs(pred - real) / real)
        plan = plans[method].describe(names, cluster.device_names) if method in plans else "all devices"
        print(f"{method:10} {real / 1e3:11.1f} {real / dp_real:6.2f} {pred / 1e3:12.1f} {pred / dp_pred:6.2f} "
              f"{(pred - real) / real:+6.0%} {med(method, 'comm_share'):10.2f} {predicted[method].comm_share:9.2f}"
              f"  {plan}")
    print(f"median |prediction error| {statistics.median(errors):.0%}")
    print(f"TAPP search {tapp.seconds:.2f} s ({tapp.config.iterations} iterations x {tapp.config.batch} plans, "
          f"{tapp.evaluations} distinct plans scored); PipeDream's DP {pipedream_s * 1e3:.1f} ms "
          f"(TAPP/PipeDream time {tapp.seconds / max(pipedream_s, 1e-9):.0f}x); profiling {profile_s:.1f} s")


if __name__ == "__main__":
    main()
