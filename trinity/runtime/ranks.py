"""Launch a torch.distributed program on local ranks: pinned to cores, in shaped nodes, watched.

`run_ranks(module, args, nproc, ...)` starts ``python -m module *args`` once per rank with the
environment ``init_process_group("gloo")`` reads (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so the
worker modules are the same as under torchrun (`trinity.runtime.torchrun`), which stays the way to
run them across real machines. What this launcher adds, for emulated clusters on one machine:

* nodes: ranks ``[k i, k (i + 1))`` are node i (``procs_per_node`` = k), or ``rank_nodes[r]`` is rank
  r's. With a `LinkSpec`, each node is a network namespace of `ShapedNodes` and its ranks bind there
  (``GLOO_SOCKET_IFNAME``): traffic between nodes crosses kernel-shaped veths, node-local traffic stays
  on the node's loopback. Without one, every rank talks over this machine's loopback.
* cores: rank r is pinned to core ``r mod n_cores`` of this process's affinity (``taskset``), so a
  rank's computation, and a slowed rank's busy-wait (`trinity.runtime.torchrun.throttle`), holds its own
  core; with more ranks than cores, ranks sharing a core are time-sliced on it by the kernel.
* a dead rank: the first rank to exit with an error stops the run at once; the error names it, how it
  died and its last line of output. The run also stops at ``timeout_s``. On every exit path
  (success, error, timeout, Ctrl-C, SIGTERM raised as an exception) every rank is killed and the
  namespaces are deleted before this returns.

Each rank writes its log to ``out_dir/rank<r>.log`` and hands back one JSON document
(`trinity.runtime.torchrun.write_rank_result`); `run_ranks` returns them by rank.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from trinity.runtime.links import LinkSpec, ShapedNodes
from trinity.runtime.torchrun import ENV_OUT, ENV_THREADS, ENV_TIMEOUT, read_rank_results
from trinity.runtime.workers import WorkerError

MASTER_PORT = 29500  # inside a fresh namespace every port is free


def cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    return sorted(os.sched_getaffinity(0))


def core_of(rank: int) -> int:
    avail = cores()
    return avail[rank % len(avail)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def run_ranks(module: str, args: list[str], nproc: int, *, out_dir: Path, timeout_s: float,
              procs_per_node: int | None = None, rank_nodes: Sequence[int] | None = None,
              link: LinkSpec | None = None, threads: int | list[int] = 1,
              collective_timeout_s: float | None = None, pin: bool = True,
              env: dict[str, str] | None = None) -> list[dict]:
    """Run ``module`` on ``nproc`` ranks (module docstring); each rank's result document, by rank."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise WorkerError(f"need at least 1 process, got {nproc!r}", field="nproc")
    if timeout_s <= 0:
        raise WorkerError(f"must be > 0, got {timeout_s}", field="timeout_s")
    k = procs_per_node or nproc
    if nproc % k:
        raise WorkerError(f"must divide nproc ({nproc}), got {k}", field="procs_per_node")
    nodes = list(rank_nodes) if rank_nodes is not None else [r // k for r in range(nproc)]
    if len(nodes) != nproc:
        raise WorkerError(f"need one node per rank ({nproc}), got {nodes}", field="rank_nodes")
    nodes = [list(dict.fromkeys(nodes)).index(n) for n in nodes]  # numbered from rank 0's node, 0
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("rank*.json"), *out_dir.glob("rank*.log")]:
        old.unlink()
    thread_list = [threads] * nproc if isinstance(threads, int) else list(threads)
    net = ShapedNodes(max(nodes) + 1, link) if link is not None else contextlib.nullcontext()
    procs: list[subprocess.Popen] = []
    with net:
        master = (ShapedNodes.address(0), MASTER_PORT) if link is not None else ("127.0.0.1", _free_port())
        try:
            for r in range(nproc):
                rank_env = {**os.environ, **(env or {}), "RANK": str(r), "WORLD_SIZE": str(nproc),
                            "LOCAL_RANK": str(nodes[:r].count(nodes[r])),
                            "LOCAL_WORLD_SIZE": str(nodes.count(nodes[r])),
                            "MASTER_ADDR": master[0], "MASTER_PORT": str(master[1]),
                            "GLOO_SOCKET_IFNAME": ShapedNodes.interface if link is not None else "lo",
                            ENV_OUT: str(out_dir.resolve()), ENV_THREADS: str(thread_list[r]),
                            "OMP_NUM_THREADS": str(thread_list[r]),
                            ENV_TIMEOUT: str(collective_timeout_s or max(10.0, timeout_s / 2))}
                argv = [sys.executable, "-m", module, *args]
                if link is not None:
                    argv = net.command(nodes[r], argv)
                if pin:
                    argv = ["taskset", "-c", str(core_of(r)), *argv]
                with open(out_dir / f"rank{r}.log", "w") as log:
                    procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=rank_env,
                                                  start_new_session=True))
            _watch(module, procs, out_dir, timeout_s)
        finally:  # done, failed, timed out or interrupted: no rank outlives the call
            _kill(procs)
    return read_rank_results(module, out_dir, nproc, f"{out_dir}/rank*.log")


def _watch(module: str, procs: list[subprocess.Popen], out_dir: Path, timeout_s: float) -> None:
    """Wait for every rank; the first to fail (a signal before an exit code, then the lowest rank) is the error."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [(c > 0, r) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            r = min(failed)[1]
            raise WorkerError(f"{module}: rank {r} failed ({_reason(codes[r])}): "
                              f"{_last_line(out_dir / f'rank{r}.log')} (log: {out_dir}/rank{r}.log)")
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            raise WorkerError(f"{module}: no result within {timeout_s:g} s; every rank was stopped "
                              f"(logs: {out_dir}/rank*.log)", field="timeout_s")
        time.sleep(0.02)
