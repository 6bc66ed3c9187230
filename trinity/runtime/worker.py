"""One TensorFlow worker process: ``python -m trinity.runtime.worker``.

Starts a `tf.distribute.Server` for task ``--task`` of the ``worker`` job in
``--hosts`` with its own thread budget, prints ``READY <host:port>`` on
stdout and serves until killed. If its parent dies (a crashed runner), it
exits too, so no worker is left orphaned. A port already taken is reported
on stdout as ``ERROR <message>`` with exit status 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

PORT_TAKEN_EXIT = 3


def _exit_with_parent(parent: int) -> None:
    """Poll the parent pid: a worker whose runner died must not live on."""
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trinity.runtime.worker")
    parser.add_argument("--hosts", required=True, help="comma-separated host:port of every worker")
    parser.add_argument("--task", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads")
    parser.add_argument("--parent", type=int, default=os.getppid())
    parser.add_argument("--cpus", help="comma-separated CPU ids to pin this worker to")
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    threading.Thread(target=_exit_with_parent, args=(args.parent,), daemon=True).start()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    hosts = args.hosts.split(",")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads,
                                      inter_op_parallelism_threads=args.threads)
    try:
        server = tf.distribute.Server(tf.train.ClusterSpec({"worker": hosts}), job_name="worker",
                                      task_index=args.task, config=config, start=True)
    except (tf.errors.UnknownError, tf.errors.UnavailableError, tf.errors.InternalError) as exc:
        print(f"ERROR cannot serve {hosts[args.task]}: {str(exc).splitlines()[0]}", flush=True)
        return PORT_TAKEN_EXIT
    print(f"READY {hosts[args.task]}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
