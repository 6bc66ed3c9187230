"""benchmarks/validation_op_traces.py, `op_records` and `transfer_records`: a traced step's ops per worker and its
held sends beside the simulator's, by hand."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import benchmark_script

from trinity.errors import TrinityError
from trinity.graph.synthetic import layered_dag
from trinity.runtime.runner import op_records, transfer_records
from trinity.runtime.workers import task_device


def test_op_records_take_each_workers_nodes_from_the_steps_first_op():
    tf = pytest.importorskip("tensorflow")
    md = tf.compat.v1.RunMetadata()
    for device, nodes in ((task_device(1), [("b", 1_000_050, 5, 25)]),
                          (task_device(0), [("a", 1_000_000, 10, 40), ("RecvTensor", 1_000_020, 0, 7)]),
                          ("/job:localhost/replica:0/task:0/device:CPU:0", [("client", 999_000, 0, 1)])):
        dev = md.step_stats.dev_stats.add(device=device)
        for name, start, op_start, op_end in nodes:
            dev.node_stats.add(node_name=name, all_start_micros=start, op_start_rel_micros=op_start,
                               op_end_rel_micros=op_end)
    # the first op starts at 1,000,010 us; the client's device is none of the workers'
    assert op_records(md, [task_device(0), task_device(1)]) == [
        (1, "b", 45.0, 20.0), (0, "a", 0.0, 30.0), (0, "RecvTensor", 10.0, 7.0)]


def test_worker_figures_by_hand():
    traces = benchmark_script("validation_op_traces")
    graph = layered_dag(6, 8, seed=1)  # ops op0..op5
    placement = np.array([0, 0, 0, 1, 1, 1])
    times = np.array([300.0, 100.0, 400.0, 250.0, 500.0, 50.0])  # each op's profiled us on its device
    records = [(0, "op0", 0.0, 330.0), (0, "op1", 330.0, 100.0), (0, "op2", 500.0, 400.0),
               (0, "RecvTensor", 900.0, 60.0),  # no graph op: counted apart
               (1, "op3", 450.0, 300.0), (1, "op4", 750.0, 550.0), (1, "op5", 1300.0, 50.0),
               (1, "op1", 1350.0, 10.0)]  # a graph op traced on a worker it was not placed on: left out
    # the simulator ran worker 0's ops in the real order, worker 1's op4 before op3
    sim = SimpleNamespace(busy_us=np.array([800.0, 800.0]), op_start=np.array([0.0, 300, 400, 500, 0, 600]),
                          op_end=np.array([300.0, 400, 800, 750, 500, 650]))
    rows = traces.worker_figures(records, graph, times, placement, sim)
    assert rows[0] == {"worker": 0, "ops": 3, "busy_ms": 0.83, "sim_busy_ms": 0.8,
                       "large_op_ratio": 1.05,  # median of 330/300 and 400/400 (op1 is under 200 us)
                       "span_ms": 0.9, "sim_span_ms": 0.8,  # op2 ends at 900 us; RecvTensor's end is no op's
                       "order_rank": 1.0, "other_ms": 0.06, "first_op_ms": 0.0}
    assert rows[1]["ops"] == 3 and rows[1]["busy_ms"] == pytest.approx(0.9)
    assert rows[1]["large_op_ratio"] == pytest.approx(1.15)  # 300/250 and 550/500
    assert rows[1]["span_ms"] == pytest.approx(1.35) and rows[1]["sim_span_ms"] == 0.75
    assert rows[1]["order_rank"] == pytest.approx(0.5)  # real ranks 1, 2, 3 against simulated 2, 1, 3
    assert rows[1]["other_ms"] == 0.0 and rows[1]["first_op_ms"] == 0.45  # worker 1 starts 450 us late
    none = SimpleNamespace(busy_us=np.zeros(2), op_start=np.zeros(6), op_end=np.zeros(6))
    idle = traces.worker_figures([], graph, times, placement, none)
    assert idle[0]["ops"] == 0 and idle[0]["span_ms"] == 0.0 and idle[0]["sim_span_ms"] == 0.0
    assert math.isnan(idle[0]["large_op_ratio"]) and math.isnan(idle[0]["order_rank"])
    assert math.isnan(idle[0]["first_op_ms"])


def test_transfer_records_read_each_recvtensor_record_from_the_steps_first_op():
    tf = pytest.importorskip("tensorflow")
    md = tf.compat.v1.RunMetadata()
    w0, w1, client = task_device(0), task_device(1), "/job:localhost/replica:0/task:0/device:CPU:0"
    records = {w0: [("a", 1_000_000, 10, 40, "", 0)],  # the step's first op starts at 1,000,010 us
               w1: [("RecvTensor", 1_000_100, 0, 50, f"[1000B] [0.1Gb/s] edge_12_scope/a:1 from {w0} to {w1}", 1000),
                    ("RecvTensor", 1_000_200, 0, 5, f"[0B] [0.000000Mb/s] edge_13_b from {w0} to {w1}", 0),
                    ("RecvTensor", 1_000_300, 0, 5, f"[0B] [0.000000Mb/s] edge_14_c from {client} to {w1}", 0),
                    ("RecvTensor", 1_000_400, 0, 5, "no label of a transfer", 0)]}
    for device, nodes in records.items():
        dev = md.step_stats.dev_stats.add(device=device)
        for name, start, op_start, op_end, label, nbytes in nodes:
            ns = dev.node_stats.add(node_name=name, all_start_micros=start, op_start_rel_micros=op_start,
                                    op_end_rel_micros=op_end, timeline_label=label)
            if nbytes:
                ns.output.add().tensor_description.allocation_description.requested_bytes = nbytes
    # a's output 1 (1000 B) and b's empty tensor, both worker 0 -> 1; the client's record and the odd label left out
    assert transfer_records(md, [w0, w1]) == [("scope/a", 1, 0, 1, 1000, 90.0, 140.0), ("b", 0, 0, 1, 0, 190.0, 195.0)]


def test_send_figures_by_hand():
    traces = benchmark_script("validation_op_traces")
    graph = layered_dag(6, 8, seed=1)  # ops op0..op5: op0-op2 ran on worker 0, op3-op5 on worker 1
    records = [(0, "op0", 0.0, 330.0), (0, "op1", 330.0, 100.0), (0, "op2", 500.0, 400.0),
               (1, "op3", 450.0, 300.0), (1, "op4", 750.0, 550.0), (1, "op5", 1300.0, 50.0)]
    transfers = [("op0", 0, 0, 1, 100, 335.0, 400.0),  # 5 us after op0 ended
                 ("op1", 0, 0, 1, 100, 1500.0, 1600.0),  # 1070 us after op1 ended, worker 0 idle since 900
                 ("op3", 0, 1, 0, 100, 1320.0, 1400.0),  # 570 us after op3 ended, worker 1 running op5
                 ("op4", 0, 1, 0, 50, 1340.0, 1345.0),  # 40 us
                 ("op2", 0, 0, 1, 0, 950.0, 960.0),  # an empty tensor: left out
                 ("Momentum", 0, 1, 0, 8, 2000.0, 2001.0)]  # no graph op: left out

    def step(rows):
        return SimpleNamespace(op_end=np.array([300.0, 400, 800, 750, 500, 650]), transfers=np.array(rows, float))

    sims = {"a": step([[0, 0, 0, 1, 100, 300, 0], [1, 0, 0, 1, 100, 1000, 0], [3, 0, 1, 0, 100, 750, 0],
                       [4, 0, 1, 0, 50, 500, 0]]),  # holds op1's 600 us
            "b": step([[0, 0, 0, 1, 100, 2300, 0], [1, 0, 0, 1, 100, 400, 0], [3, 0, 1, 0, 100, 750, 0],
                       [2, 0, 0, 1, 0, 900, 0]])}  # holds op0's 2000 us, never sends op4's: left out of every count
    row = traces.send_figures(transfers, records, graph, sims, startup_us=400.0, held_us=500.0)
    assert row == {"sends": 3,
                   "real_held": 2, "real_held_ms": pytest.approx(1.64), "real_held_late": 2,  # op1 and op3 end >= 400
                   "a_held": 1, "a_held_ms": pytest.approx(0.6), "a_held_late": 1,
                   "b_held": 1, "b_held_ms": pytest.approx(2.0), "b_held_late": 0,  # op0 ended at 330 (real)
                   "real_held_sender_idle": 0.5}


def test_transfer_records_take_each_tensors_output_from_its_send_in_the_partition_graphs():
    tf = pytest.importorskip("tensorflow")
    md = tf.compat.v1.RunMetadata()
    w0, w1 = task_device(0), task_device(1)
    pg = md.partition_graphs.add()
    for tensor, read in (("edge_12_a", "a:2"), ("edge_13_a", "a"), ("edge_14_b", "^b")):
        node = pg.node.add(name=f"send_{tensor}", op="_Send", device=w0, input=[read])
        node.attr["tensor_name"].s = tensor.encode()
    dev = md.step_stats.dev_stats.add(device=w1)
    for tensor, start, nbytes in (("edge_12_a", 1_000_000, 800), ("edge_13_a", 1_000_010, 400)):
        ns = dev.node_stats.add(node_name="RecvTensor", all_start_micros=start, op_start_rel_micros=0,
                                op_end_rel_micros=5, timeline_label=f"[{nbytes}B] [1Gb/s] {tensor} from {w0} to {w1}")
        ns.output.add().tensor_description.allocation_description.requested_bytes = nbytes
    # a's outputs 2 and 0 crossed on two edges, each record naming only "a"
    assert transfer_records(md, [w0, w1]) == [("a", 2, 0, 1, 800, 0.0, 5.0), ("a", 0, 0, 1, 400, 10.0, 15.0)]


def test_a_part_without_its_calibrated_graph_is_refused_naming_it():
    traces = benchmark_script("validation_op_traces")
    with pytest.raises(TrinityError, match="part/calibration/graph.json.gz: part: not found") as refused:
        traces.main(["nowhere/part", "--graphdef", "nowhere/none.pb"])
    assert "\n" not in str(refused.value)  # one line (run_main prints it and exits 2)


def test_a_step_count_under_one_is_refused_naming_it(tmp_path):
    traces = benchmark_script("validation_op_traces")
    part, graphdef = tmp_path / "part", tmp_path / "graph.graphdef.pb"
    (part / "calibration").mkdir(parents=True)
    (part / "calibration" / "graph.json.gz").write_bytes(b"")  # only looked for: the count is refused first
    graphdef.write_bytes(b"")
    with pytest.raises(TrinityError, match="--steps: must be 1 or more, got 0"):
        traces.main([str(part), "--graphdef", str(graphdef), "--steps", "0"])
    with pytest.raises(TrinityError, match="--startup-ms: must be 0 or more, got -1.0"):
        traces.main([str(part), "--graphdef", str(graphdef), "--startup-ms", "-1"])
