"""Check the roofline speed model against a GPU: exported PyTorch models' ops timed with CUDA events.

The simulator's GPU op times come from `trinity.profile.speed_model`, a roofline over each op's FLOPs and
bytes that nobody had checked against a GPU. On a machine with one, this exports each case's training step
there (`export_torch_model(device="cuda")`: traced and FLOP-counted on the GPU, since a few ATen ops differ
by device), times every op with CUDA events (`profile_torch(device="cuda")`, median of ``--steps`` steps)
and the whole step without per-op events, and sets the roofline of the device's kind (``--kind``, default
h200) beside them: per op, per op type and for the whole step (`trinity.profile.speed_check`).

Cases: the registry's two PyTorch models as the pipeline exports them (small: launches dominate), and each
made large enough that kernels dominate. Matmuls and convolutions run in FP32 without TF32 (the speed
model's premise: FP32 peak, no tensor cores).

    python benchmarks/speed_model_check.py --runs 2 --out reports/speed_model_check   # on a GPU (about 1 min)
    python benchmarks/speed_model_check.py --device cpu --kind p100 --cases transformer_lm --steps 1 --out X
        # the same path on this machine's CPU (the comparison then means nothing; the tests run it so)

Writes ``summary.csv`` (one row per case), ``by_type.csv``, ``per_op.csv`` and ``speed_model_check.png``
(roofline against measured time per op, log-log) under ``--out``; with ``--runs N`` every case is exported
and timed again N-1 times, each later run's summaries in ``summary_run<k>.csv`` and ``by_type_run<k>.csv``
(how far the measurements move from run to run).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import torch

from trinity.errors import TrinityError, run_main
from trinity.export.torch_graph import build_torch_model, export_torch_model, op_nodes, op_type, trace_training_step
from trinity.profile.speed_check import by_type, per_op, summarize
from trinity.profile.speed_model import spec
from trinity.profile.torch_profile import profile_torch

#: name -> (registered model, batch or None for the registry's, builder options)
CASES = {
    "transformer_lm": ("transformer_lm", None, {}),
    "resnet_small": ("resnet_small", None, {}),
    "transformer_lm_large": ("transformer_lm", 16, {"seq_len": 256, "vocab_size": 8000, "d_model": 1024,
                                                    "n_heads": 16, "d_ff": 4096, "n_layers": 4}),
    "resnet_wide": ("resnet_small", 128, {"widths": (64, 128, 256), "image_size": 64}),
}


def types_differing_from_cpu(model: str, batch: int | None, options: dict, cuda_types: Counter) -> str:
    """Op types where the CPU export (the pipeline's) and this device's export differ, as 'type:+n' / 'type:-n'."""
    built, _, _ = build_torch_model(model, batch, **options)
    traced = trace_training_step(built.module, built.example_inputs, built.targets, built.loss_fn, name=model)
    cpu_types = Counter(op_type(n, traced.placeholders) for n in op_nodes(traced.gm))
    diff = {t: cuda_types[t] - cpu_types[t] for t in cpu_types | cuda_types if cuda_types[t] != cpu_types[t]}
    return " ".join(f"{t}:{n:+d}" for t, n in sorted(diff.items()))


def check_case(name: str, device: str, kind: str, steps: int, warmup: int) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    model, batch, options = CASES[name]
    graph = export_torch_model(model, batch, device=device, **options)
    profiled, report = profile_torch(graph, steps=steps, warmup=warmup, progress=True, device=device)
    table = per_op(profiled, spec(kind))
    summary = {"case": name, "model": model, "batch": report["batch_size"], "device": report["device"],
               "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
               "torch": torch.__version__, "cuda": torch.version.cuda, "kind": kind,
               "ops": graph.n_ops, "gflops": graph.meta["flops"] / 1e9, "steps": steps,
               "load_1min": os.getloadavg()[0],
               **summarize(table, report["step_us_median"]),
               # the measured step's spread over the steps (quartiles), against which the errors are read
               "step_q1_us": report["step_us_q1"], "step_q3_us": report["step_us_q3"],
               "differs_from_cpu_export": types_differing_from_cpu(model, batch, options,
                                                                   Counter(o.type for o in graph.ops))}
    return summary, by_type(table).assign(case=name), table.assign(case=name)


def scatter(table: pd.DataFrame, path: Path, kind: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    for case, rows in table[~table["view"]].groupby("case", sort=False):
        ax.scatter(rows["measured_us"], rows["roofline_us"], s=6, alpha=0.5, label=case)
    views = table[table["view"]]
    ax.scatter(views["measured_us"], views["roofline_us"], s=8, marker="x", c="grey", alpha=0.6,
               label="views, every case (no kernel)")
    lo = max(min(table["measured_us"].min(), table["roofline_us"].min()), 0.1)
    hi = max(table["measured_us"].max(), table["roofline_us"].max())
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="equal")
    for f in (0.5, 2):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlabel="measured op time (us, CUDA events)",
           ylabel=f"roofline op time (us, {kind})", title=f"Speed model against the GPU, per op ({kind})")
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def warm_up_gpu(seconds: float = 3.0) -> None:
    """Bring the GPU's clocks up from idle (a third of full speed) before the first case is timed."""
    x = torch.randn(4096, 4096, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x @ x
        torch.cuda.synchronize()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSVs and the figure")
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the same path, for tests)")
    ap.add_argument("--kind", default="h200", help="the speed model's device kind to compare with")
    ap.add_argument("--cases", nargs="+", default=list(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1, help="check every case this many times")
    args = ap.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        raise TrinityError(f"unknown case {unknown[0]!r}; known: {', '.join(CASES)}", field="--cases")
    if args.device not in ("cuda", "cpu"):
        raise TrinityError(f"must be cuda or cpu, got {args.device!r}", field="--device")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise TrinityError("no CUDA device on this machine (run it where a GPU is, or pass --device cpu)",
                           field="--device")
    if args.steps < 1 or args.warmup < 0:
        raise TrinityError(f"need steps >= 1 and warmup >= 0, got {args.steps}, {args.warmup}", field="--steps")
    if not 1 <= args.runs <= 10:
        raise TrinityError(f"must be 1 to 10, got {args.runs}", field="--runs")
    spec(args.kind)  # an unknown kind fails here, before any work
    # The speed model's premise: FP32 arithmetic, no tensor cores (cuDNN would use TF32 by default).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.device == "cuda":
        warm_up_gpu()

    args.out.mkdir(parents=True, exist_ok=True)
    for run in range(1, args.runs + 1):
        summaries, types, tables = [], [], []
        for case in args.cases:
            summary, kinds, table = check_case(case, args.device, args.kind, args.steps, args.warmup)
            summaries.append(summary)
            types.append(kinds)
            tables.append(table)
            print(f"run {run}, {case}: {summary['ops_timed']} ops, step {summary['measured_step_us']:.0f} us "
                  f"measured, {summary['roofline_step_us']:.0f} us roofline ({summary['step_error']:+.1%}; views "
                  f"free {summary['step_error_views_free']:+.1%}); per op median |error| "
                  f"{summary['median_abs_error']:.0%}, within 2x {summary['within_2x']:.0%}", flush=True)
        suffix = "" if run == 1 else f"_run{run}"
        pd.DataFrame(summaries).to_csv(args.out / f"summary{suffix}.csv", index=False, float_format="%.6g")
        pd.concat(types).to_csv(args.out / f"by_type{suffix}.csv", index=False, float_format="%.6g")
        if run == 1:
            table = pd.concat(tables)
            table.to_csv(args.out / "per_op.csv", index=False, float_format="%.6g")
            scatter(table, args.out / "speed_model_check.png", args.kind)


if __name__ == "__main__":
    run_main(main)
