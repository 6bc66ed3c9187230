"""Real-runtime benchmarks: `make bench` (the runtime part).

* Runner overhead per step: the same training step (all ops on one worker)
  timed through the runner on a TensorFlow worker and in a plain in-process
  session with the same thread count, in interleaved rounds; the overhead is
  the difference of medians and their ratio (gRPC, master dispatch, fetch).
* Calibration figures of 2 local workers: link latency and bandwidth (with
  the fit's R^2), the share of a transfer's time that the sender's processor
  spends on it, and the time to calibrate.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def in_process_session(graph, graph_def, threads: int):
    import tensorflow as tf

    from trinity.runtime.runner import seeded_graph_def

    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.compat.v1.import_graph_def(seeded_graph_def(tf.compat.v1.GraphDef.FromString(graph_def)), name="")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    sess = tf.compat.v1.Session(graph=tf_graph, config=config)
    sess.run(graph.meta["init_op"])
    return sess


def worker_session(runner, graph, placement):
    import tensorflow as tf

    from trinity.runtime.runner import placed_graph_def

    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.compat.v1.import_graph_def(placed_graph_def(runner.graph_def, graph, placement, runner.workers.devices),
                                      name="")
    sess = tf.compat.v1.Session(runner.workers.target, graph=tf_graph, config=runner.session_config())
    sess.run(graph.meta["init_op"])
    return sess


def bench_overhead(graph, graph_def, *, rounds: int, steps: int) -> dict:
    """Median step via the runner on one worker vs in process, both with one thread."""
    from trinity.runtime.runner import Runner
    from trinity.runtime.workers import LocalWorkers

    fetches = [graph.meta["train_op"], graph.meta["loss"]]
    with LocalWorkers(1, threads=1) as workers:
        runner = Runner(graph, graph_def, workers)
        local = in_process_session(graph, graph_def, threads=1)
        remote = worker_session(runner, graph, np.zeros(graph.n_ops, np.int64))
        times = {"local": [], "worker": []}
        for sess in (local, remote):  # warm up both
            for _ in range(2):
                sess.run(fetches)
        for r in range(rounds):
            for key, sess in ((("local", local), ("worker", remote)) if r % 2 == 0 else
                              (("worker", remote), ("local", local))):
                for _ in range(steps):
                    t0 = time.perf_counter()
                    sess.run(fetches)
                    times[key].append((time.perf_counter() - t0) * 1e3)
        local.close()
        remote.close()
    lm, wm = statistics.median(times["local"]), statistics.median(times["worker"])
    return {"in_process_ms": lm, "worker_ms": wm, "overhead_ms": wm - lm, "ratio": wm / lm}


def bench_calibration(repeats: int) -> dict:
    from trinity.runtime.calibrate import measure_link, measure_send_cpu_share
    from trinity.runtime.workers import LocalWorkers

    t0 = time.perf_counter()
    with LocalWorkers(2) as workers:
        start_s = time.perf_counter() - t0
        link = measure_link(workers, repeats=repeats, progress=False)
        share = measure_send_cpu_share(workers, link, progress=False)
    return {"workers_start_s": start_s, "latency_us": link.latency_us, "bandwidth_GBps": link.bandwidth_GBps,
            "link_r2": link.r2, "send_cpu_share": share["send_cpu_share"], "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graphs", nargs="*", help="TensorFlow exports (default: tiny_cnn, exported here)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--link-repeats", type=int, default=15)
    args = parser.parse_args()

    from trinity.export import export_model, read_graph_def
    from trinity.graph import load_graph

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(p) for p in args.graphs]
        if not paths:
            paths = [Path(tmp) / "tiny_cnn.json.gz"]
            export_model("tiny_cnn", paths[0])
        print("runner overhead per step (one worker, 1 thread, vs an in-process session with 1 thread; "
              f"medians of {args.rounds} interleaved rounds x {args.steps} steps)")
        for path in paths:
            g = load_graph(path)
            gd = read_graph_def(path, g)
            r = bench_overhead(g, gd, rounds=args.rounds, steps=args.steps)
            print(f"  {g.name:>14} ({g.n_ops} ops): in-process {r['in_process_ms']:.2f} ms, on a worker "
                  f"{r['worker_ms']:.2f} ms, overhead {r['overhead_ms']:+.2f} ms per step ({r['ratio']:.3f}x)")
    c = bench_calibration(args.link_repeats)
    print(f"calibration of 2 local workers ({c['seconds']:.1f} s, workers up in {c['workers_start_s']:.1f} s): "
          f"latency {c['latency_us']:.0f} us, bandwidth {c['bandwidth_GBps']:.2f} GB/s (R^2 {c['link_r2']:.4f}), "
          f"send CPU share {c['send_cpu_share']:.2f}")


if __name__ == "__main__":
    main()
