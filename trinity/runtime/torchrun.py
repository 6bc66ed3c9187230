"""Run a torch.distributed program on local processes through torchrun, and what its workers use.

The same worker module runs unchanged across machines (``torchrun --nnodes ... -m module``,
NCCL on GPUs); locally `run_torchrun` starts it with ``--standalone`` and guards it:

* every worker's collectives time out (``init_worker``), so a dead peer is an error, not a hang;
* the whole run has a wall-clock limit, after which torchrun and every worker are killed;
* a failing rank is named with the last lines of its output (`WorkerError`), and no process
  outlives the call, also when the caller is interrupted.

Each rank hands back one JSON document (`write_rank_result`); `run_torchrun` returns them by rank.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

from trinity.fileio import read_json, write_json
from trinity.runtime.workers import WorkerError

ENV_OUT = "TRINITY_RANK_OUT"  # folder the ranks write rank<r>.json into
ENV_THREADS = "TRINITY_THREADS"  # torch threads per local rank: "2" or "1,1,2,2"
ENV_TIMEOUT = "TRINITY_COLLECTIVE_TIMEOUT_S"

_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank: (\d+)\).*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def _descendants(pid: int) -> list:
    import psutil
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun (it stops its workers), then SIGKILL whatever is left of the tree."""
    import psutil
    children = _descendants(proc.pid)  # taken first: workers run in sessions of their own
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
    for p in [*children, *_descendants(proc.pid)]:
        try:
            p.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _failure(log: str, module: str, returncode: int) -> str:
    """One line: which rank failed and its last words (torchrun's error summary names the rank)."""
    rank_line = ""
    root = log.rfind("Root Cause")  # torchrun's summary: the first failure, then the ranks it stopped
    m = _FAILED_RANK.search(log, root if root >= 0 else 0)
    if m:
        rank, local_rank, code = m.groups()
        reason = f"killed by signal {-int(code)}" if int(code) < 0 else f"exit code {code}"
        rank_line = f"rank {rank} failed ({reason})"
        said = re.findall(rf"^\[[A-Za-z_]*{local_rank}\]:(.*\S.*)$", log, re.M)  # --tee prefixes "[default1]:"
        if said:
            rank_line += f": {said[-1].strip()[:300]}"
    else:
        tail = [ln for ln in log.splitlines() if ln.strip()][-1:] or [""]
        rank_line = f"torchrun exited with status {returncode}: {tail[0][:300]}"
    return f"{module}: {rank_line}"


def run_torchrun(module: str, args: list[str], nproc: int, *, out_dir: Path, timeout_s: float,
                 threads: int | list[int] = 1, collective_timeout_s: float | None = None,
                 env: dict[str, str] | None = None) -> list[dict]:
    """Run ``python -m module *args`` on ``nproc`` local ranks; each rank's result document, by rank."""
    if nproc < 1:
        raise WorkerError(f"need at least 1 process, got {nproc}", field="nproc")
    if timeout_s <= 0:
        raise WorkerError(f"must be > 0, got {timeout_s}", field="timeout_s")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank*.json"):
        old.unlink()
    thread_list = [threads] * nproc if isinstance(threads, int) else list(threads)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "--max-restarts=0", "--monitor-interval=0.2", "--tee=3", "-m", module, *args]
    run_env = {**os.environ, **(env or {}), ENV_OUT: str(out_dir.resolve()),
               ENV_THREADS: ",".join(str(t) for t in thread_list), "OMP_NUM_THREADS": str(max(thread_list)),
               ENV_TIMEOUT: str(collective_timeout_s or max(10.0, timeout_s / 2))}
    log_path = out_dir / "torchrun.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=run_env, start_new_session=True)
        try:
            returncode = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            raise WorkerError(f"{module}: no result within {timeout_s:g} s; every rank was stopped "
                              f"(log: {log_path})", field="timeout_s") from None
        finally:  # interrupted (Ctrl-C, SIGTERM as an exception) or done: leave nothing running
            _kill_tree(proc)
    if returncode != 0:
        raise WorkerError(_failure(log_path.read_text(errors="replace"), module, returncode))
    return read_rank_results(module, out_dir, nproc, log_path)


def read_rank_results(module: str, out_dir: Path, nproc: int, log: Path | str) -> list[dict]:
    """Every rank's result document (`write_rank_result`), by rank; a missing one names the rank."""
    results = []
    for rank in range(nproc):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            raise WorkerError(f"{module}: rank {rank} exited without writing its result (log: {log})")
        results.append(read_json(path))
    return results


# ------------------------------------------------------------------ inside a worker
def init_worker(timeout_s: float | None = None) -> tuple[int, int]:
    """Join the process group (gloo, collectives time out) and take this rank's thread count."""
    import torch
    import torch.distributed as dist
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    threads = os.environ.get(ENV_THREADS, "1").split(",")
    torch.set_num_threads(int(threads[min(local_rank, len(threads) - 1)]))
    timeout = timeout_s if timeout_s is not None else float(os.environ.get(ENV_TIMEOUT, 60))
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


def write_rank_result(obj: Any) -> None:
    """This rank's result document, for `run_torchrun` (the folder comes from its environment)."""
    import torch.distributed as dist
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))
    write_json(Path(os.environ.get(ENV_OUT, ".")) / f"rank{rank}.json", obj)


@contextmanager
def throttle(factor: float) -> Iterator[None]:
    """Make the block cost ``factor`` times its computation: a slower device, emulated on this one.

    The rank busy-computes (factor - 1) x the CPU time the block's thread took, so a slowed rank holds
    its core for as long as the slower device would compute, and gives nothing away to the other ranks
    (a sleep would lend its core to them). CPU time rather than wall time: a rank time-sliced with another
    on one core is not charged the other's share twice.
    """
    if factor < 1:
        raise ValueError(f"slowdown factor must be >= 1, got {factor}")
    start = time.thread_time()
    yield
    if factor > 1:
        target = time.thread_time() + (factor - 1) * (time.thread_time() - start)
        while time.thread_time() < target:
            pass
