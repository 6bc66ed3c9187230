"""trinity.machine: the shares of the cores' time that other processes and other virtual machines took, from
hand-written kernel statistics."""

import math
import os
from pathlib import Path

import pytest

from trinity.machine import CpuSample, MachineWatch, _core_ticks, _process_table, cpu_sample, interference, job_ticks


def test_core_ticks_sum_the_cores_asked_for_busy_steal_and_every_state():
    stat = ("cpu  100 100 100 100 100 100 100 100 100 100\n"  # the all-cores line: not a core
            "cpu0 10 1 5 80 2 1 1 3 7 0\n"  # busy 16, steal 3, total 103 (guest 7 is in user already)
            "cpu1 20 0 10 60 0 0 0 10 0 0\n"  # busy 30, steal 10, total 100
            "cpu2 99 99 99 99 99 99 99 99 0 0\n"  # not this process's core
            "intr 1 2 3\n")
    assert _core_ticks(stat, {0, 1}) == (46, 13, 203)
    assert _core_ticks(stat, {1}) == (30, 10, 100)


def test_job_ticks_count_the_process_and_every_descendant_once():
    # 10 started 11 and 12; 11 started 13; 20 is another job, 1 is init
    table = {1: (0, 500), 10: (1, 7), 11: (10, 20), 12: (10, 3), 13: (11, 100), 20: (1, 1000)}
    assert job_ticks(table, 10) == 7 + 20 + 3 + 100
    assert job_ticks(table, 11) == 120
    assert job_ticks(table, 99) == 0  # gone


def test_a_process_table_reads_parents_and_cpu_ticks_past_a_name_with_spaces_and_parentheses(tmp_path):
    # fields after "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime ...
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (python (worker) 1) S 7 42 42 0 -1 4194560 10 0 0 0 30 5 2 1 20 0\n")
    (tmp_path / "self").mkdir()  # not a pid: skipped
    assert _process_table(tmp_path) == {42: (7, 38)}


def fake_proc(root, busy, steal, idle, job):
    cores = sorted(os.sched_getaffinity(0))
    (root / "stat").write_text("".join(f"cpu{c} {busy} 0 0 {idle} 0 0 0 {steal} 0 0\n" for c in cores))
    me = root / str(os.getpid())
    me.mkdir(exist_ok=True)
    (me / "stat").write_text(f"{os.getpid()} (pytest) R 1 1 1 0 -1 0 0 0 0 0 {job} 0 0 0 20 0\n")
    return len(cores)


def test_a_sample_reads_the_cores_and_this_job_and_interference_compares_two(tmp_path):
    n = fake_proc(tmp_path, busy=100, steal=10, idle=890, job=50)
    before = cpu_sample(tmp_path)
    assert before == CpuSample(busy=100 * n, steal=10 * n, total=1000 * n, job=50)
    # each core: 100 ticks more, 60 of them busy, 5 stolen; this job ran 40 ticks in all
    fake_proc(tmp_path, busy=160, steal=15, idle=925, job=90)
    after = cpu_sample(tmp_path)
    shares = interference(before, after)
    assert shares["other_cpu"] == pytest.approx((60 * n - 40) / (100 * n))
    assert shares["steal"] == pytest.approx(0.05)


def test_interference_is_nan_without_samples_or_time_and_never_below_zero():
    a = CpuSample(busy=100, steal=0, total=1000, job=0)
    assert all(math.isnan(v) for v in interference(None, a).values())
    assert all(math.isnan(v) for v in interference(a, a).values())  # no time between them
    busier_job = CpuSample(busy=110, steal=0, total=1100, job=30)  # the job's ticks outran the cores' count
    assert interference(a, busier_job) == {"other_cpu": 0.0, "steal": 0.0}
    assert cpu_sample(Path("/nonexistent-proc")) is None


def test_a_watch_on_this_machine_records_load_and_shares():
    metrics = MachineWatch().metrics()
    assert set(metrics) == {"load_before", "load_after", "other_cpu", "steal"}
    if os.path.exists("/proc/stat"):
        assert all(0 <= metrics[k] <= 1 or math.isnan(metrics[k]) for k in ("other_cpu", "steal"))


def test_a_process_gone_or_half_read_is_left_out_of_the_table(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("")  # read as the process exited
    (tmp_path / "8").mkdir()  # no stat at all
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "stat").write_text("9 (ok) S 1 9 9 0 -1 0 0 0 0 0 4 5 0 0 20 0\n")
    assert _process_table(tmp_path) == {9: (1, 9)}
