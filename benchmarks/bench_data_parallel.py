"""Data parallelism measured: DDP, plain PS, DASO and H-PS on 4 local processes in 2 nodes.

One worker throttled 3x, the inter-node link delayed by 1 ms + bytes / (100 MB/s) (TrainConfig's
defaults). Per method: wall time to the target validation loss, final accuracy, bytes sent, each as a
ratio against DDP measured in the same run (methods interleaved within each seed).

    python benchmarks/bench_data_parallel.py [--seeds 3] [--epochs 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from trinity.data_parallel import METHODS, TrainConfig, train
from trinity.fileio import write_json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--timeout-s", type=float, default=180)
    p.add_argument("--out", type=Path, default=None, help="write every run's result here (JSON)")
    a = p.parse_args()
    cfg = replace(TrainConfig(), epochs=a.epochs).validate()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(a.seeds):
            for method in METHODS:
                r = train(method, seed=seed, config=cfg, out_dir=Path(tmp) / f"{method}-{seed}", timeout_s=a.timeout_s)
                rows.append(r)
                print(f"seed {seed} {method:5s} target {r['time_to_target_s']} s, acc {r['final_val_acc']:.3f}, "
                      f"{r['sent_bytes'] / 1e6:.0f} MB, total {r['train_time_s']:.2f} s", flush=True)
    if a.out:
        write_json(a.out, rows)

    def med(method: str, key: str) -> float | None:
        vals = [r[key] for r in rows if r["method"] == method and r[key] is not None]
        return statistics.median(vals) if vals else None

    print(f"\n{cfg.nproc} processes in {cfg.nproc // cfg.procs_per_node} nodes, slow ranks {cfg.slow_ranks} x{cfg.slowdown}, "
          f"link {cfg.link.latency_ms} ms + bytes / {cfg.link.bandwidth_MBps} MB/s, data {rows[0]['data']}, "
          f"target val loss {cfg.target_val_loss}, {a.epochs} epochs, {a.seeds} seed(s), medians")
    print(f"{'method':6s} {'reached':>7s} {'to target s':>11s} {'vs ddp':>7s} {'train s':>8s} {'vs ddp':>7s} "
          f"{'acc':>6s} {'MB sent':>8s} {'vs ddp':>7s}")
    base = {k: med("ddp", k) for k in ("time_to_target_s", "train_time_s", "sent_bytes")}
    for m in METHODS:
        reached = sum(r["time_to_target_s"] is not None for r in rows if r["method"] == m)
        t, tt, b, acc = (med(m, k) for k in ("time_to_target_s", "train_time_s", "sent_bytes", "final_val_acc"))
        ratio = lambda x, k: f"{x / base[k]:.2f}" if x is not None and base[k] else "-"  # noqa: E731
        print(f"{m:6s} {reached:>4d}/{a.seeds:<2d} {t if t is None else round(t, 2)!s:>11s} "
              f"{ratio(t, 'time_to_target_s'):>7s} {tt:8.2f} {ratio(tt, 'train_time_s'):>7s} {acc:6.3f} "
              f"{b / 1e6:8.0f} {ratio(b, 'sent_bytes'):>7s}")


if __name__ == "__main__":
    main()
