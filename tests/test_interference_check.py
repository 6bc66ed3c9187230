"""benchmarks/interference_check.py: a busy loop started outside the job, and the summary of its runs, by hand."""

import os
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError
from trinity.machine import _process_table, job_ticks


def test_the_summary_gives_each_conditions_median_step_and_mean_shares_against_quiet():
    ic = benchmark_script("interference_check")
    table = pd.DataFrame({"condition": ["quiet", "busy loop", "busy loop", "quiet"], "run": [0, 0, 1, 1],
                          "step_ms": [100.0, 150.0, 130.0, 110.0], "other_cpu": [0.0, 0.4, 0.3, 0.02],
                          "steal": [0.0, 0.0, 0.1, 0.0]})
    rows = ic.summary(table).set_index("condition")
    assert rows.loc["quiet"].to_dict() == pytest.approx({"runs": 2, "step_ms": 105.0, "other_cpu": 0.01, "steal": 0.0,
                                                         "step_vs_quiet": 1.0})
    assert rows.loc["busy loop"].to_dict() == pytest.approx({"runs": 2, "step_ms": 140.0, "other_cpu": 0.35,
                                                             "steal": 0.05, "step_vs_quiet": 140 / 105})


def test_the_busy_loop_is_no_process_of_this_job_and_stops():
    if not os.path.exists("/proc/stat"):
        pytest.skip("Linux only")
    ic = benchmark_script("interference_check")
    core = sorted(os.sched_getaffinity(0))[-1]
    pid = ic.start_outside_job(core)
    try:
        time.sleep(0.3)
        table = _process_table(Path("/proc"))
        assert pid in table and table[pid][0] != os.getpid()  # re-parented
        mine = job_ticks({p: (parent, 1) for p, (parent, _) in table.items()}, os.getpid())
        everyone_but = job_ticks({p: (parent, 1) for p, (parent, _) in table.items() if p != pid}, os.getpid())
        assert mine == everyone_but  # not counted among this job's processes
    finally:
        ic.stop(pid)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init
    stat = open(f"/proc/{pid}/stat").read() if os.path.exists(f"/proc/{pid}") else ""
    assert stat == "" or stat.split(") ")[1].startswith("Z")  # gone, or a zombie awaiting its new parent


def test_bad_arguments_are_refused_in_one_line_naming_them(tmp_path):
    ic = benchmark_script("interference_check")
    with pytest.raises(TrinityError, match="--runs: must be 1 or more, got 0") as refused:
        ic.main(["--runs", "0"])
    assert "\n" not in str(refused.value)
    with pytest.raises(TrinityError, match="--graph: not found"):
        ic.main(["--graph", str(tmp_path / "none.json.gz")])
