"""benchmarks/trace_completeness.py: each traced step's record of what crossed, the rule before (the trace with the
most transfers) and today's (every trace pooled), by hand."""

import pandas as pd
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError
from trinity.runtime.runner import Measurement


def traced(expected: set[str], recorded: dict[str, int]) -> Measurement:
    m = Measurement("s")
    m.add_trace(expected, recorded, [1, 1], [])
    return m


def test_each_traced_step_beside_the_most_complete_one_so_far_and_all_pooled():
    tc = benchmark_script("trace_completeness")
    expected = {"edge_1_a", "edge_2_b", "edge_3_c"}
    traces = [traced(expected, {"edge_1_a": 2_000_000}),  # lost b's and c's records (worker 1's)
              traced(expected, {"edge_2_b": 500_000, "edge_3_c": 0}),  # lost a's (worker 0's)
              traced(expected, {"edge_1_a": 2_000_000, "edge_2_b": 500_000, "edge_3_c": 0})]
    rows = tc.completeness_rows("s", traces, sim_MB=2.5)
    assert [(r["expected"], r["recorded"], r["missing"]) for r in rows] == [(3, 1, 2), (3, 2, 1), (3, 3, 0)]
    assert [r["trace_MB"] for r in rows] == [2.0, 0.5, 2.5]
    # the rule before keeps the first (one transfer with data each, the first kept): 2.0 MB of 2.5
    assert [r["most_transfers_MB"] for r in rows] == [2.0, 2.0, 2.5]
    assert [(r["pooled_MB"], r["pooled_missing"]) for r in rows] == [(2.0, 2), (2.5, 0), (2.5, 0)]
    table = tc.summary(pd.DataFrame(rows))
    assert table.to_dict("records") == [{"strategy": "s", "traces": 3, "incomplete": pytest.approx(2 / 3),
                                         "sim_MB": 2.5, "most_transfers_2_MB": 2.0, "pooled_2_MB": 2.5,
                                         "pooled_2_missing": 0, "pooled_all_missing": 0}]


def test_bad_arguments_are_refused_in_one_line_naming_them(tmp_path):
    tc = benchmark_script("trace_completeness")
    with pytest.raises(TrinityError, match="--traces: must be 1 or more, got 0") as refused:
        tc.main(["--traces", "0"])
    assert "\n" not in str(refused.value)
    with pytest.raises(TrinityError, match="--graph: not found"):
        tc.main(["--graph", str(tmp_path / "none.json.gz")])
