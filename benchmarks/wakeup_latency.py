"""How long a small gloo message round trip takes when the receiving thread shares its core with busy processes.

On the local clusters two ranks share each core, and H-PS's exchange thread (DASO's global sum too) waits for
messages while its rank and the core's other rank compute. This times, with nothing else of the project
running, round trips (``send`` then ``recv``, median over ``--rounds``) between two processes pinned to cores
0 and 1, with 0, 1 or 2 busy processes (one torch thread of matrix products each) pinned beside the first:
what a message costs a rank whose core is busy, apart from any training run.

    make wakeup-latency    # -> reports/wakeup_latency.csv (~1 min)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import time
from pathlib import Path

import pandas as pd

from trinity.errors import TrinityError, run_main

WARMUP = 5
TIMEOUT_S = 120.0


def _busy(core: int, stop) -> None:
    os.sched_setaffinity(0, {core})
    import torch

    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    while not stop.is_set():
        a = (a @ a).clamp_(-1, 1)


def _peer(rank: int, port: int, nbytes: int, rounds: int, out) -> None:
    os.sched_setaffinity(0, {rank})
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.zeros(nbytes // 4)
    times = []
    for i in range(WARMUP + rounds):
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(t, 1)
            dist.recv(t, 1)
        else:
            dist.recv(t, 0)
            dist.send(t, 0)
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put((statistics.median(times) * 1e3, statistics.quantiles(times, n=10)[-1] * 1e3))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def round_trip_ms(nbytes: int, busy: int, rounds: int) -> tuple[float, float]:
    """(median, 90th percentile) ms of a round trip of ``nbytes`` with ``busy`` processes on the sender's core;
    every process is stopped on the way out, whatever happens."""
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_busy, args=(0, stop)) for _ in range(busy)]
    port = _free_port()
    try:
        for p in procs:
            p.start()
        time.sleep(0.5)  # the busy ones are computing before the first round trip
        peers = [ctx.Process(target=_peer, args=(r, port, nbytes, rounds, out)) for r in (0, 1)]
        procs += peers
        for p in peers:
            p.start()
        try:
            return out.get(timeout=TIMEOUT_S)
        except Exception:
            raise TrinityError(f"no round trips of {nbytes} bytes within {TIMEOUT_S:.0f} s", field="peers") from None
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 65536, 700_000], help="bytes per message")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--csv", type=Path, default=Path("reports/wakeup_latency.csv"))
    args = ap.parse_args()
    if any(s < 4 or s % 4 for s in args.sizes):
        raise TrinityError(f"must be whole float32 messages, multiples of 4 bytes >= 4, got {args.sizes}",
                           field="--sizes")
    if args.rounds < 10:
        raise TrinityError(f"must be >= 10, got {args.rounds}", field="--rounds")
    if len(os.sched_getaffinity(0)) < 2:
        raise TrinityError("needs 2 cores to pin the two peers apart", field="cores")
    rows = []
    for nbytes in args.sizes:
        for busy in (0, 1, 2):
            median, p90 = round_trip_ms(nbytes, busy, args.rounds)
            rows.append({"bytes": nbytes, "busy_on_core": busy, "round_trip_ms": round(median, 3),
                         "round_trip_p90_ms": round(p90, 3)})
            print(f"{nbytes} bytes, {busy} busy beside the sender: {median:.3f} ms (p90 {p90:.3f})", flush=True)
    table = pd.DataFrame(rows)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    print(table.pivot(index="bytes", columns="busy_on_core", values="round_trip_ms").to_string(), f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
