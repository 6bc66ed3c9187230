"""The torchrun launcher: results by rank, a dead or hanging rank is a named error, nothing left running."""

import os
import time
from pathlib import Path

import psutil
import pytest

from trinity.runtime.torchrun import run_torchrun, throttle
from trinity.runtime.workers import WorkerError

WORKERS = str(Path(__file__).parent / "workers")


def _run(mode, tmp_path, **kw):
    env = {"PYTHONPATH": os.pathsep.join([WORKERS, os.environ.get("PYTHONPATH", "")])}
    return run_torchrun("allreduce_worker", [mode], 2, out_dir=tmp_path, env=env, threads=[1, 2], **kw)


def _no_leftovers(pids=()):
    time.sleep(0.5)
    mine = [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not mine, [p.cmdline() for p in mine]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_results_by_rank(tmp_path):
    results = _run("ok", tmp_path, timeout_s=120)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["sum"] for r in results] == [6.0, 6.0]  # (1 + 2) summed twice over 2 ranks
    assert [r["threads"] for r in results] == [1, 2]
    _no_leftovers([r["pid"] for r in results])


def test_dead_rank_is_named(tmp_path):
    with pytest.raises(WorkerError, match=r"rank 1 failed \(exit code 3\): rank 1 exits on purpose"):
        _run("die", tmp_path, timeout_s=120, collective_timeout_s=20)
    _no_leftovers()


def test_hanging_rank_times_out(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError, match="no result within 5 s"):
        _run("hang", tmp_path, timeout_s=5, collective_timeout_s=60)
    assert time.monotonic() - start < 30
    _no_leftovers()


def _spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_throttle_busy_computes_the_extra_time_on_its_core():
    """A 3x slower rank computes 3x the block's CPU time: the extra is spent holding the core, not sleeping."""
    wall, cpu = time.perf_counter(), time.thread_time()
    with throttle(3.0):
        _spin(0.05)
    assert time.thread_time() - cpu >= 0.15 - 1e-3  # the extra 0.1 s is CPU time, not a sleep
    assert time.perf_counter() - wall >= 0.15 - 1e-3
    cpu = time.thread_time()
    with throttle(3.0):
        time.sleep(0.05)  # waiting is not computing: nothing to slow down
    assert time.thread_time() - cpu < 0.02
    with pytest.raises(ValueError):
        with throttle(0.5):
            pass
