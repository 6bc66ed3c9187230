"""benchmarks/step_start.py: a start stamp every root op waits for, and the summary of the stamps, by hand."""

import pandas as pd
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError
from trinity.runtime.workers import task_device


def test_each_worker_gets_a_stamp_that_its_root_ops_wait_for():
    tf = pytest.importorskip("tensorflow")
    ss = benchmark_script("step_start")
    w0, w1 = task_device(0), task_device(1)
    graph_def = tf.compat.v1.GraphDef()
    graph_def.node.add(name="x", op="Const", device=w0)
    graph_def.node.add(name="y", op="Neg", device=w0, input=["x"])
    graph_def.node.add(name="z", op="Const", device=w1)
    graph_def.node.add(name="c", op="NoOp", device=w1, input=["^y"])
    out = ss.stamped(graph_def, [w0, w1])
    nodes = {n.name: (n.op, n.device, list(n.input)) for n in out.node}
    assert nodes == {"x": ("Const", w0, ["^start0"]), "y": ("Neg", w0, ["x"]), "z": ("Const", w1, ["^start1"]),
                     "c": ("NoOp", w1, ["^y"]), "start0": ("Timestamp", w0, []), "start1": ("Timestamp", w1, [])}
    assert [n.name for n in graph_def.node] == ["x", "y", "z", "c"]  # the input is left as it was


def test_receives_count_each_workers_recvs_from_the_other():
    tf = pytest.importorskip("tensorflow")
    ss = benchmark_script("step_start")
    w0, w1, client = task_device(0), task_device(1), "/job:localhost/replica:0/task:0/device:CPU:0"
    md = tf.compat.v1.RunMetadata()
    pg = md.partition_graphs.add()
    for op, src, dst in (("_Recv", w0, w1), ("_HostRecv", w0, w1), ("_Recv", w1, w0), ("_Recv", client, w0),
                         ("_Send", w0, w1), ("_Recv", w1, w1)):
        node = pg.node.add(name=f"n{len(pg.node)}", op=op, device=dst)
        node.attr["send_device"].s, node.attr["recv_device"].s = src.encode(), dst.encode()
    assert ss.receives(md, [w0, w1]) == [1, 2]


def test_the_summary_gives_medians_and_the_second_workers_start_after_the_first():
    ss = benchmark_script("step_start")
    table = pd.DataFrame({"graph": "m b8", "strategy": ["s", "s", "s", "t"], "round": [0, 0, 1, 0],
                          "crossings": [7, 7, 7, 0], "received0": [3, 3, 3, 0], "received1": [4, 4, 4, 0],
                          "step_ms": [100.0, 110.0, 130.0, 50.0], "start0_ms": [1.0, 2.0, 1.5, 1.0],
                          "start1_ms": [1.5, 12.0, 1.0, 1.2]})
    rows = ss.summary(table).set_index("strategy")
    # the later worker's median start: 1.5 ms at 7 crossings, 1.2 at none: 0.3 ms over 7 crossings
    assert rows.loc["s"].drop("graph").to_dict() == pytest.approx(
        {"steps": 3, "crossings": 7, "received0": 3, "received1": 4, "step_ms": 110.0, "start0_ms": 1.5, "start1_ms": 1.5, "skew_min_ms": -0.5,
         "skew_median_ms": 0.5, "skew_max_ms": 10.0, "later_start_ms": 1.5, "fit_intercept_ms": 1.2,
         "fit_us_per_crossing": 300 / 7})
    assert rows.loc["t", "skew_median_ms"] == pytest.approx(0.2) and rows.loc["t", "later_start_ms"] == 1.2


def test_bad_arguments_are_refused_in_one_line_naming_them(tmp_path):
    ss = benchmark_script("step_start")
    with pytest.raises(TrinityError, match="--rounds: must be 1 or more, got 0") as refused:
        ss.main(["--rounds", "0"])
    assert "\n" not in str(refused.value)
    with pytest.raises(TrinityError, match="--graph: not found"):
        ss.main(["--graph", str(tmp_path / "none.json.gz")])
