"""Running strategies on TensorFlow workers: the link fit, the placed GraphDef, real runs on local
worker processes, refusals before anything runs, and the failures a cluster can throw at a run."""

import dataclasses
import json
import os
import re
import socket
import time

import numpy as np
import pandas as pd
import pytest

from trinity.cli import main
from trinity.cluster import cluster_from_dict
from trinity.errors import PlacementError, TrinityError
from trinity.graph import load_graph
from trinity.graph.synthetic import layered_dag
from trinity.placement import Strategy
from trinity.placers import place
from trinity.runtime import workers as workers_module
from trinity.runtime.calibrate import DEFAULT_SIZES, fit_link
from trinity.runtime.runner import Runner, placed_graph_def, seeded_graph_def
from trinity.runtime.workers import (
    ClusterSpecWorkers,
    LocalWorkers,
    WorkerError,
    Workers,
    free_port,
    task_device,
)

tf = pytest.importorskip("tensorflow")

DEVICES = [task_device(0), task_device(1)]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """(path, OpGraph, GraphDef bytes) of the tiny_cnn export."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.json.gz"
    assert main(["export", "tiny_cnn", "--out", str(path)]) == 0
    g = load_graph(path)
    return path, g, path.with_name(g.meta["graphdef"]).read_bytes()


@pytest.fixture(scope="module")
def workers():
    with LocalWorkers(2) as w:
        yield w


class FakeWorkers(Workers):
    """Two workers nobody runs: enough for everything a Runner does before it runs a step."""

    def __init__(self, n=2):
        self.hosts = [f"localhost:{free_port()}" for _ in range(n)]

    def check(self):
        pass


def two_devices(memory_GB=1.0):
    return cluster_from_dict({"name": "two", "devices": [{"name": f"worker{i}", "kind": "cpu", "memory_GB": memory_GB}
                                                         for i in range(2)],
                              "default_link": {"bandwidth_GBps": 1.0, "latency_us": 10.0}})


def other_graph_strategy(path):
    """A strategy file for a small synthetic graph, not tiny_cnn."""
    g = layered_dag(10, 14, seed=3)
    s = Strategy.from_array(g, two_devices(), np.zeros(g.n_ops, np.int64))
    s.save(path)
    return g, s


def pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# 1. the link fit


def test_fit_link_recovers_exact_latency_and_bandwidth():
    latency_us, bandwidth_GBps = 37.5, 2.5  # 2,500 bytes per microsecond
    sizes = [4_096, 65_536, 524_288, 2_097_152, 8_388_608]
    extra = [2 * latency_us + s / (bandwidth_GBps * 1e3) for s in sizes]
    fit = fit_link(sizes, extra)
    assert fit.latency_us == pytest.approx(latency_us, rel=1e-6)
    assert fit.bandwidth_GBps == pytest.approx(bandwidth_GBps, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.sizes == sizes and fit.extra_us == pytest.approx(extra)
    assert fit.predict_us(1e6) == pytest.approx(latency_us + 400.0, rel=1e-6)  # one transfer of 1 MB


@pytest.mark.parametrize("sizes, extra", [
    ([1_000, 10_000, 100_000], [300.0, 200.0, 100.0]),
    ([1_000, 10_000, 100_000], [100.0, 100.0, 100.0]),
    (DEFAULT_SIZES, [123.456] * 6),  # flat: least squares finds a slope of +3e-22, which is rounding, not a link
])
def test_fit_link_refuses_times_that_do_not_grow(sizes, extra):
    with pytest.raises(TrinityError, match="does not grow with size") as err:
        fit_link(sizes, extra)
    assert err.value.field == "link"


def test_anchored_scales_the_profile_by_the_drift_of_the_one_worker_step():
    from trinity.graph.ir import Edge, Op, OpGraph
    from trinity.runtime.calibrate import anchored
    from trinity.sim import Simulator

    from conftest import make_cluster

    # a 10 us, b 5 us, c 1 us, d never profiled: the whole step on worker 0 adds up to 16 us
    g = OpGraph([Op("a", "A", 10.0, output_bytes=(8,)), Op("b", "B", 5.0), Op("c", "C", 1.0), Op("d", "D")],
                [Edge("a", "b", 0), Edge("a", "c", 0)])
    # profiled at 20 us a step (4 us of it outside the ops), timed at 30 beside the fit set: 1.5x slower now
    scaled, factor = anchored(g, profiled_us=20.0, measured_us=30.0)
    assert factor == 1.5
    assert [op.compute_us for op in scaled.ops[:3]] == pytest.approx([15.0, 7.5, 1.5])
    assert scaled.ops[3].compute_us is None
    assert Simulator(scaled, make_cluster(2)).simulate(np.zeros(4, np.int64)).step_time_us == pytest.approx(24.0)
    assert scaled.digest() == g.digest() and g.ops[0].compute_us == 10.0  # same graph, the input untouched
    with pytest.raises(TrinityError, match=r"x3\.00, outside \[0\.5, 2\]\): the machine changed") as err:
        anchored(g, profiled_us=20.0, measured_us=60.0)
    assert err.value.field == "calibration"
    _, factor = anchored(g, profiled_us=20.0, measured_us=60.0, allowed=(0.2, 5.0))  # a wider range takes it
    assert factor == 3.0


# 2. the placed and seeded GraphDef


def test_placed_graph_def_places_every_node_as_asked(tiny):
    _, g, gd_bytes = tiny
    gd = tf.compat.v1.GraphDef.FromString(gd_bytes)
    p = np.random.default_rng(0).integers(0, 2, g.n_ops)
    placed = placed_graph_def(gd, g, p, DEVICES)
    assert [n.name for n in placed.node] == [n.name for n in gd.node]
    assert all(n.device == "" for n in gd.node)  # the input is left alone
    device = {n.name: n.device for n in placed.node}
    assert set(device.values()) == set(DEVICES)  # every node placed, on one of the workers
    assert len(gd.node) > g.n_ops  # initialisers lie outside the step
    assert {op.name: device[op.name] for op in g.ops} == {op.name: DEVICES[d] for op, d in zip(g.ops, p)}
    # an initialiser's Assign runs where its variable lives
    for var in ("conv0/kernel", "logits/bias", "bn1/moving_mean"):
        assert device[f"{var}/Assign"] == device[var]


def test_seeded_graph_def_seeds_random_ops_deterministically(tiny):
    _, _, gd_bytes = tiny
    gd = tf.compat.v1.GraphDef.FromString(gd_bytes)
    random = [n.name for n in gd.node if "seed" in n.attr and "seed2" in n.attr]
    assert sorted(random) == ["images/RandomUniform", "labels"]
    assert all(n.attr["seed"].i == 0 and n.attr["seed2"].i == 0 for n in gd.node if n.name in random)
    a, b = seeded_graph_def(gd, seed=0), seeded_graph_def(gd, seed=0)
    assert a == b and a != gd
    seeds = {n.name: (n.attr["seed"].i, n.attr["seed2"].i) for n in a.node if n.name in random}
    assert all(s != 0 and s2 != 0 for s, s2 in seeds.values())
    assert len(set(seeds.values())) == 2  # the two ops draw different streams
    other = {n.name: (n.attr["seed"].i, n.attr["seed2"].i) for n in seeded_graph_def(gd, seed=5).node
             if n.name in random}
    assert other != seeds
    assert seeded_graph_def(a, seed=5) == a  # a seed already set is kept
    assert [n for n in a.node if n.name not in random] == [n for n in gd.node if n.name not in random]


# 3. real runs on two local workers


def test_single_and_round_robin_compute_the_same_losses(tiny, workers):
    _, g, gd = tiny
    runner = Runner(g, gd, workers, timeout_s=60)
    single = runner.measure(np.zeros(g.n_ops, np.int64), "single", steps=2, warmup=1)
    rr = place("round-robin", g, runner.cluster).placement
    assert set(rr) == {0, 1}
    split = runner.measure(rr, "round-robin", steps=2, warmup=1, keep_ops=True)
    assert len(single.loss) == len(split.loss) == 4  # warm-up + timed + traced
    assert single.op_trace == []  # kept only when asked
    # the traced step's ops, on both workers, from its first op: every graph op placed on a worker ran there
    names = {op.name: int(d) for op, d in zip(g.ops, rr)}
    ran = {(task, node) for task, node, _, _ in split.op_trace}
    assert {task for task, _ in ran} == {0, 1} and min(start for _, _, start, _ in split.op_trace) == 0.0
    assert all(dur >= 0 for *_, dur in split.op_trace)
    assert all(names[node] == task for task, node in ran if node in names)
    # its crossings: between the workers, each from the worker its producer ran on, as many bytes as the trace counts
    assert single.transfer_trace == [] and split.transfer_trace
    assert all(src != dst and names.get(producer, src) == src and start <= end
               for producer, _, src, dst, _, start, end in split.transfer_trace)
    assert sum(nbytes for *_, nbytes, _, _ in split.transfer_trace) == split.crossed_bytes
    assert np.all(np.isfinite(single.loss)) and len(set(single.loss)) > 1  # it trains
    np.testing.assert_allclose(split.loss, single.loss, rtol=1e-5)
    assert len(single.step_us) == len(split.step_us) == 2 and min(single.step_us + split.step_us) > 0
    assert single.crossed_bytes == 0 and single.transfers == 0
    assert split.crossed_bytes > 0 and split.transfers > 0
    assert single.overridden == [] and split.overridden == []
    assert single.peak_memory_bytes[0] > 0 and len(split.peak_memory_bytes) == 2
    assert all(b > 0 for b in split.peak_memory_bytes)


def test_interleaved_rounds_trace_twice_and_agree_on_the_bytes(tiny, workers):
    _, g, gd = tiny
    runner = Runner(g, gd, workers, timeout_s=60)
    rr = place("round-robin", g, runner.cluster).placement
    m = runner.measure_interleaved({"round-robin": rr}, rounds=3, steps=1, warmup=0, progress=False)["round-robin"]
    once = runner.measure(rr, "once", steps=1, warmup=0)
    assert m.traces == 2 and once.traces == 1 and len(m.step_us) == 3
    assert (m.crossed_bytes, m.transfers) == (once.crossed_bytes, once.transfers) and m.transfers > 0


# 4.-6. refused before anything runs


def test_split_colocation_group_is_refused(tiny):
    _, g, gd = tiny
    runner = Runner(g, gd, FakeWorkers(), cluster=two_devices())
    members = max(g.colocation_groups().values(), key=len)
    assert len(members) > 1
    p = np.zeros(g.n_ops, np.int64)
    p[[op.name for op in g.ops].index(members[-1])] = 1
    with pytest.raises(PlacementError, match="splits colocation group") as err:
        runner.check(p, "flipped")
    assert err.value.source == "flipped" and members[-1] in str(err.value)
    with pytest.raises(PlacementError, match="splits colocation group"):
        runner.measure(p, "flipped")  # FakeWorkers would fail to connect: it must not get that far


def test_placement_that_would_exhaust_memory_is_refused(tiny):
    _, g, gd = tiny
    runner = Runner(g, gd, FakeWorkers(), cluster=two_devices(memory_GB=1e-6))
    with pytest.raises(PlacementError, match="would exhaust worker 0's memory") as err:
        runner.measure(np.zeros(g.n_ops, np.int64), "single")
    message = str(err.value)
    assert message.endswith("its budget is 1 kB"), message  # 1e-6 GB, not "0.00 GB"
    value, unit = re.search(r"the simulator estimates ([0-9.]+) (GB|MB|kB|B) there", message).groups()
    assert float(value) * {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}[unit] > 1e3, message
    assert err.value.field == "placement"


def test_strategy_for_another_graph_is_refused(tiny, tmp_path):
    _, g, _ = tiny
    _, s = other_graph_strategy(tmp_path / "other.json")
    with pytest.raises(PlacementError, match=g.digest()) as err:
        Strategy.load(tmp_path / "other.json").to_indices(g, source="other.json")
    assert err.value.field == "graph_digest" and s.graph_digest in str(err.value)
    assert str(err.value).startswith("other.json: graph_digest: ")


# 7.-9. workers that cannot start, cannot be reached, or die


def test_port_already_taken():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=f"port {port} is already taken") as err:
            LocalWorkers(1, ports=[port])
        assert time.monotonic() - t0 < 5
    assert err.value.field == "ports"


def test_port_taken_after_the_check():
    """A port bound but not listening passes the up-front check; the worker itself reports it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
        with pytest.raises(WorkerError, match=f"worker 0: cannot serve localhost:{port}") as err:
            LocalWorkers(1, ports=[port], start_timeout_s=30)
    assert err.value.field == "ports"


def test_unreachable_worker_in_cluster_spec(tmp_path):
    closed = free_port()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"worker: [localhost:{closed}]\nmemory_GB: 2\n")
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=f"worker 0 at localhost:{closed} is unreachable") as err:
        ClusterSpecWorkers(spec)
    assert time.monotonic() - t0 < 5
    assert err.value.field == "worker[0]" and err.value.source == str(spec)


@pytest.mark.parametrize("doc, field", [
    ({"worker": ["localhost:2222", "nohostport"]}, "worker[1]"),
    ({"worker": ["localhost:99999"]}, "worker[0]"),
    ({"worker": []}, "worker"),
    ({"workers": ["localhost:2222"]}, "worker"),
])
def test_malformed_cluster_spec(tmp_path, doc, field):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps(doc))
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as err:
        ClusterSpecWorkers(spec)
    assert err.value.field == field and str(err.value).startswith(f"{spec}: {field}: ")
    assert time.monotonic() - t0 < 1  # refused before connecting to anyone


def test_cluster_spec_of_running_workers(tmp_path, workers):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(json.dumps({"cluster": {"worker": workers.hosts}, "memory_GB": 3}))  # TF_CONFIG's layout
    remote = ClusterSpecWorkers(spec)
    assert remote.hosts == workers.hosts and remote.memory_bytes == 3_000_000_000
    assert remote.target == workers.target and remote.devices == DEVICES


def test_killed_worker_fails_the_run_and_nothing_is_left(tiny):
    _, g, gd = tiny
    w = LocalWorkers(2)
    pids = [p.pid for p in w.procs]
    try:
        runner = Runner(g, gd, w, timeout_s=30)
        rr = place("round-robin", g, runner.cluster).placement
        run = runner.session_run

        def kill_before_first_step(sess, fetches, what, trace=False):
            if what.startswith("a step") and w.procs[1].poll() is None:
                w.kill(1)  # the session is open and the variables initialised on both workers
            return run(sess, fetches, what, trace)

        runner.session_run = kill_before_first_step
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=r"worker 1 \(localhost:\d+\) died") as err:
            runner.measure(rr, "round-robin", steps=1, warmup=1)
        assert err.value.field == "workers"
        assert time.monotonic() - t0 < 60
        with pytest.raises(WorkerError, match=r"worker 1 \(localhost:\d+\) died"):  # refused up front now
            runner.measure(rr, "round-robin", steps=1, warmup=1)
        # A worker that died where the runner cannot see it (another machine): TensorFlow waits for it,
        # and the run's timeout turns the wait into an error.
        w.check = lambda: None
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match="initialising round-robin did not finish within 2 s") as err:
            Runner(g, gd, w, timeout_s=2).measure(rr, "round-robin", steps=1, warmup=1)
        assert err.value.field == "timeout"
        assert time.monotonic() - t0 < 20
    finally:
        w.close()
    assert w.procs == []
    assert all(pid_gone(pid) for pid in pids)


# 10. the CLI end to end


def test_cli_validate_end_to_end(tiny, tmp_path, capsys):
    path, _, _ = tiny
    out = tmp_path / "validation"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(["validate", str(path), "--placers", "single", "round-robin", "--rounds", "1", "--steps", "1",
                 "--warmup", "1", "--profile-steps", "2", "--out", str(out), "--mlflow-uri", uri,
                 # tiny_cnn's 4 ms step moves up to x3 on a loaded CI machine, past a real model's range
                 "--anchor-range", "0.1", "10"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert "results in" in stdout
    table = pd.read_csv(out / "results.csv")
    assert sorted(table["strategy"]) == ["round-robin", "single"]
    assert list(table["overridden"]) == [0, 0]
    assert (table["real_step_ms"] > 0).all() and (table["sim_step_ms"] > 0).all()
    rows = table.set_index("strategy")
    assert rows.loc["single", "real_crossed_MB"] == 0 and rows.loc["round-robin", "real_crossed_MB"] > 0
    # the op times anchored to the one-worker step of these rounds: it is simulated as measured, and fitted
    assert rows.loc["single", "step_error"] == pytest.approx(0.0, abs=1e-9)
    assert rows["calibration_set"].to_dict() == {"single": True, "round-robin": True}  # a fit placer
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategies"] == 2 and summary["overridden_ops"] == 0
    assert 0.1 <= summary["anchor_scale"] <= 10.0  # read_csv's float parser may differ from JSON by an ulp
    assert np.allclose(table["anchor_scale"], summary["anchor_scale"], rtol=1e-12, atol=0)
    assert (out / "sim_vs_real.png").stat().st_size > 0
    cluster = (out / "calibration" / "cluster.yaml").read_text()
    assert "worker0" in cluster and "worker1" in cluster and "bandwidth_GBps" in cluster
    assert (out / "calibration" / "graph.json.gz").exists()
    assert "send_cpu_share" in cluster and "corun_slowdown" in cluster and "step_sync_us" in cluster
    assert "send_on_request: true" in cluster and "sends_last: true" in cluster  # the workers' held sends
    calibration = json.loads((out / "calibration" / "calibration.json").read_text())
    shared = calibration["shared_machine"]
    assert shared["corun_slowdown"] >= 0 and shared["step_sync_us"] >= 0
    assert set(shared["median_us"]) == {"A", "B", "AB", "local", "both"} and calibration["machine"]["load_after"] >= 0
    assert 0 <= calibration["machine"]["other_cpu"] <= 1 and 0 <= shared["steal"] <= 1  # what else the machine did
    # the fit set timed as the validation times (1 round of 1 step here), the one-worker step beside it
    fit, anchor = calibration["transfer_fit"], calibration["anchor"]
    assert (fit["rounds"], fit["steps"]) == (1, 1) and "single" not in fit["measured_step_us"]
    # the calibration's anchor within the range the command allowed (tiny_cnn's step moved x2.5 in a CI run)
    assert anchor["placer"] == "single" and anchor["measured_step_us"] > 0 and 0.1 <= anchor["scale"] <= 10.0
    assert (table["real_q1_ms"] <= table["real_step_ms"]).all() and (table["real_step_ms"] <= table["real_q3_ms"]).all()
    assert (table["load_max"] >= table["load_min"]).all() and (table["load_min"] >= 0).all()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run, = client.search_runs([client.get_experiment_by_name("trinity-validation").experiment_id])
    assert run.data.metrics["strategies"] == 2 and run.data.metrics["overridden_ops"] == 0
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"results.csv", "sim_vs_real.png"}



def test_cli_validate_refits_the_transfer_model_to_its_rounds_when_asked(tiny, tmp_path, capsys):
    from trinity.cluster import load_cluster
    from trinity.runtime.validate import Candidate, refit_to_rounds, sync_to_rounds

    path, _, _ = tiny
    out = tmp_path / "validation"
    code = main(["validate", str(path), "--placers", "single", "round-robin", "metis", "m-topo", "--rounds", "1",
                 "--steps", "1", "--warmup", "1", "--profile-steps", "2", "--out", str(out), "--no-mlflow",
                 "--anchor-range", "0.1", "10", "--refit-to-rounds", "--sync-to-rounds"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert "refitted to the fit set's rows of these rounds" in stdout
    assert "a step over both workers anchored to the fit set's split rows of these rounds" in stdout
    table = pd.read_csv(out / "results.csv")
    # results.csv is the refit's, then anchored: the calibration's cluster and measurements refitted and anchored
    # again give the same rows
    graph = load_graph(out / "calibration" / "graph.json.gz")
    cluster = load_cluster(out / "calibration" / "cluster.yaml")
    candidates = [Candidate(n, s, Strategy.load(out / "strategies" / f"{n}.json").to_indices(graph))
                  for n, s in zip(table["strategy"], table["source"])]
    again, refitted, fit = refit_to_rounds(graph, cluster, candidates, table)
    again, drift = sync_to_rounds(graph, refitted, candidates, again)
    assert fit is not None and drift == pytest.approx(table["step_sync_drift_ms"].iloc[0] * 1e3)
    assert np.allclose(again["sim_step_ms"], table["sim_step_ms"], rtol=1e-9)
    assert np.allclose(table["step_error"], (table["sim_step_ms"] - table["real_step_ms"]) / table["real_step_ms"])

def test_measurements_taken_before_a_worker_dies_are_kept(tiny, tmp_path, monkeypatch):
    from trinity.placers import place
    from trinity.runtime.runner import Runner
    from trinity.runtime.validate import Candidate, validate

    path, g, gd = tiny
    with LocalWorkers(2) as workers:
        cluster = Runner(g, gd, workers).cluster
        candidates = [Candidate("single", "single", place("single", g, cluster).placement),
                      Candidate("round-robin", "round-robin", place("round-robin", g, cluster).placement)]
        measure = Runner.measure

        def measure_then_kill(self, *args, **kwargs):  # worker 1 dies after the first strategy
            m = measure(self, *args, **kwargs)
            workers.kill(1)
            return m

        monkeypatch.setattr(Runner, "measure", measure_then_kill)
        with pytest.raises(WorkerError, match="worker 1"):
            validate(g, gd, workers, cluster, candidates, out_dir=tmp_path, rounds=1, steps=1, warmup=0,
                     timeout_s=30, progress=False)
    table = pd.read_csv(tmp_path / "results.csv")
    assert list(table["strategy"]) == ["single"] and table["real_step_ms"].iloc[0] > 0
    assert (tmp_path / "strategies" / "round-robin.json").exists()


def test_cli_validate_refuses_strategy_for_another_graph_before_starting_workers(tiny, tmp_path, capsys,
                                                                                  monkeypatch):
    path, g, _ = tiny
    other_graph_strategy(tmp_path / "other.json")

    def no_workers(*args, **kwargs):
        raise AssertionError("workers were started")

    monkeypatch.setattr(workers_module, "open_workers", no_workers)
    monkeypatch.setattr(workers_module, "LocalWorkers", no_workers)
    code = main(["validate", str(path), str(tmp_path / "other.json"), "--out", str(tmp_path / "v")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("trinity: error: ") and "graph_digest" in err and g.digest() in err
    assert not (tmp_path / "v" / "results.csv").exists()


@pytest.mark.parametrize("low, high", [("0.5", "0.9"), ("1.5", "2"), ("0", "2"), ("0.5", "inf")])
def test_cli_refuses_an_anchor_range_without_1_inside_before_starting_workers(tiny, tmp_path, capsys, monkeypatch,
                                                                               low, high):
    path, _, _ = tiny

    def no_workers(*args, **kwargs):
        raise AssertionError("workers were started")

    monkeypatch.setattr(workers_module, "open_workers", no_workers)
    monkeypatch.setattr(workers_module, "LocalWorkers", no_workers)
    for command in ("validate", "calibrate"):
        placers = ["--placers", "single"] if command == "validate" else []
        code = main([command, str(path), *placers, "--anchor-range", low, high, "--calibration", str(tmp_path / "c")])
        _, err = capsys.readouterr()
        assert code == 2 and "anchor-range" in err.strip().splitlines()[-1], (command, err)


def test_anchor_range_is_two_numbers_around_1():
    from trinity.runtime.calibrate import check_anchor_range

    assert check_anchor_range([0.2, 5]) == (0.2, 5.0) and check_anchor_range((1, 1)) == (1.0, 1.0)
    for bad in (None, [1], [0.5, 2, 3], ["a", 2], [0, 2], [1.2, 2], [0.5, 0.9], [0.5, float("inf")]):
        with pytest.raises(TrinityError) as err:
            check_anchor_range(bad, field="f")
        assert err.value.field == "f", bad


def test_more_pinned_workers_than_cores_is_refused_before_starting():
    cores = len(os.sched_getaffinity(0))
    with pytest.raises(WorkerError, match=f"need {cores + 1} cores") as err:
        LocalWorkers(cores + 1)
    assert err.value.field == "workers"


def test_a_calibration_for_another_graph_worker_count_or_machine_is_refused(tmp_path):
    from trinity.runtime.calibrate import check_calibration

    g, other = layered_dag(10, 14, seed=3), layered_dag(10, 14, seed=4)
    workers = FakeWorkers(2)
    workers.threads = 1
    recorded = {"machine": socket.gethostname(), "threads_per_worker": 1}
    check_calibration(tmp_path, g, two_devices(), recorded, g, workers)  # its own: accepted
    cases = [((other, two_devices(), recorded, g, workers), "calibration.graph"),
             ((g, two_devices(), recorded, g, FakeWorkers(3)), "calibration.workers"),
             ((g, two_devices(), {**recorded, "machine": "elsewhere"}, g, workers), "calibration.machine"),
             ((g, two_devices(), {**recorded, "threads_per_worker": 2}, g, workers), "calibration.threads_per_worker")]
    for args, field in cases:
        with pytest.raises(TrinityError) as err:
            check_calibration(tmp_path, *args)
        assert err.value.field == field and "--recalibrate" in str(err.value)


def fit_case(latency_us: float = 20.0, truth: dict | None = None, latency_scale: float = 0.5, **terms):
    """(graph, cluster, three placers' placements, their step times on the cluster at ``latency_scale``
    times its latency and with ``truth``'s terms) on a 40-op random DAG over 2 devices: the transfer fit's
    hand-built case."""
    import dataclasses

    from trinity.graph.synthetic import random_dag
    from trinity.sim import Simulator

    g = random_dag(40, 0.2, seed=5)
    cluster = cluster_from_dict({"name": "w", **terms, "devices": [{"name": f"d{i}", "memory_GB": 1} for i in range(2)],
                                 "default_link": {"bandwidth_GBps": 0.05, "latency_us": latency_us}})
    placements = [place(p, g, cluster, **({"seed": 1} if p == "random" else {})).placement
                  for p in ("round-robin", "random", "m-etf")]
    truth = Simulator(g, dataclasses.replace(cluster, latency=cluster.latency * latency_scale, **(truth or {})))
    return g, cluster, placements, [truth.simulate(p).step_time_us for p in placements]


def test_fit_transfer_model_keeps_the_shared_machine_terms():
    from trinity.runtime.calibrate import FITTED_LATENCY_SCALES, fit_transfer_model

    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3}, corun_slowdown=0.2, step_sync_us=50.0)
    fit = fit_transfer_model(g, cluster, placements, measured, latency_scales=FITTED_LATENCY_SCALES)
    assert (fit.send_cpu_share, fit.latency_scale, fit.link_streams) == (pytest.approx(0.3), 0.5, 1)
    assert fit.error == pytest.approx(0.0, abs=1e-12)


def test_fit_transfer_model_recovers_the_share_and_latency_that_made_the_times():
    from trinity.runtime.calibrate import FITTED_LATENCY_SCALES, fit_transfer_model

    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3})
    fit = fit_transfer_model(g, cluster, placements, measured, latency_scales=FITTED_LATENCY_SCALES)
    assert (fit.send_cpu_share, fit.latency_scale, fit.link_streams, fit.error) == (pytest.approx(0.3), 0.5, 1, 0.0)


def test_fit_transfer_model_keeps_the_measured_latency_by_default():
    from trinity.runtime.calibrate import fit_transfer_model

    # times made at the measured latency: the share found exactly; at half of it, scale 1 is all the fit may try
    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3}, latency_scale=1.0)
    fit = fit_transfer_model(g, cluster, placements, measured)
    assert (fit.send_cpu_share, fit.latency_scale, fit.link_streams, fit.error) == (pytest.approx(0.3), 1.0, 1, 0.0)
    fit = fit_transfer_model(*fit_case(truth={"send_cpu_share": 0.3}))
    assert fit.latency_scale == 1.0 and fit.error > 0


def test_fit_transfer_model_recovers_the_streams_that_made_the_times():
    import dataclasses

    from trinity.runtime.calibrate import FITTED_LATENCY_SCALES, fit_transfer_model
    from trinity.sim import Simulator

    g, cluster, placements, measured = fit_case(200.0, truth={"link_streams": 4})
    one_stream = [Simulator(g, dataclasses.replace(cluster, latency=cluster.latency * 0.5)).simulate(p).step_time_us
                  for p in placements]
    assert one_stream != measured  # the streams matter on these placements, so the fit can tell them apart
    fit = fit_transfer_model(g, cluster, placements, measured, latency_scales=FITTED_LATENCY_SCALES)
    assert (fit.send_cpu_share, fit.latency_scale, fit.link_streams, fit.error) == (0.0, 0.5, 4, 0.0)


def test_fit_transfer_model_recovers_the_corun_slowdown_that_made_the_times():
    from trinity.runtime.calibrate import FITTED_CORUN_SLOWDOWNS, TransferFit, fit_transfer_model

    # times made with both devices slowed by 20% while both compute; the cluster measured 3%
    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3, "corun_slowdown": 0.2},
                                                latency_scale=1.0, corun_slowdown=0.03)
    fit = fit_transfer_model(g, cluster, placements, measured, corun_slowdowns=FITTED_CORUN_SLOWDOWNS)
    assert (fit.send_cpu_share, fit.corun_slowdown, fit.error) == (pytest.approx(0.3), 0.2, 0.0)
    assert fit.apply(cluster).corun_slowdown == 0.2
    assert fit_transfer_model(g, cluster, placements, measured) == fit  # fitted by default
    kept = fit_transfer_model(g, cluster, placements, measured, corun_slowdowns=None)  # the measured one alone
    assert kept.corun_slowdown is None and kept.apply(cluster).corun_slowdown == 0.03 and kept.error > 0
    # the measured one wins a tie: times made at 3% choose it over any fitted value
    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3, "corun_slowdown": 0.03},
                                                latency_scale=1.0, corun_slowdown=0.03)
    assert fit_transfer_model(g, cluster, placements, measured, corun_slowdowns=(0.03, 0.2)).corun_slowdown is None
    assert TransferFit(0.0, 1.0, 1, 0.0).apply(cluster).corun_slowdown == 0.03


def test_fit_transfer_model_recovers_the_receive_share_of_the_bytes():
    from trinity.runtime.calibrate import fit_transfer_model

    # times made with 0.3 of each transfer's bytes on the sender's processor and 0.5 on the receiver's
    g, cluster, placements, measured = fit_case(truth={"send_cpu_share": 0.3, "receive_cpu_share": 0.5},
                                                latency_scale=1.0, cpu_share_of="bytes")
    fit = fit_transfer_model(g, cluster, placements, measured, corun_slowdowns=None)
    assert (fit.send_cpu_share, fit.receive_cpu_share, fit.error) == (pytest.approx(0.3), 0.5, 0.0)
    assert fit.apply(cluster).receive_cpu_share == 0.5 and fit.apply(cluster).cpu_share_of == "bytes"
    assert fit_transfer_model(g, cluster, placements, measured, corun_slowdowns=None,
                              receive_shares=(0.0,)).error > 0  # without it the times are out of reach



def test_refit_to_rounds_fits_the_fit_sets_rows_on_the_anchored_op_times_and_simulates_every_row_again():
    import dataclasses

    from trinity.runtime.calibrate import times_scaled
    from trinity.runtime.validate import Candidate, refit_to_rounds
    from trinity.sim import Simulator

    g, cluster, _, _ = fit_case(latency_scale=1.0, corun_slowdown=0.03)  # the calibration's: no share, 3% corun
    names = {"round-robin": "round-robin", "m-etf": "m-etf", "metis": "metis", "random": "held-out"}
    candidates = [Candidate(name, source, place(source, g, cluster, **({"seed": 1} if source == "random" else {}))
                            .placement) for source, name in names.items()]
    # the rounds ran the op times 2x the calibration's, with a 0.3 send share and both workers 20% slower together
    truth = Simulator(times_scaled(g, 2.0), dataclasses.replace(cluster, send_cpu_share=0.3, corun_slowdown=0.2))
    before = Simulator(times_scaled(g, 2.0), cluster)
    rows = []
    for c in candidates:
        real, sim = truth.simulate(c.placement), before.simulate(c.placement)
        rows.append({"strategy": c.name, "source": c.source, "calibration_set": c.source != "random",
                     "anchor_scale": 2.0, "sim_step_ms": sim.step_time_us / 1e3, "sim_comm_MB": 0.0,
                     "real_step_ms": real.step_time_us / 1e3, "real_crossed_MB": float(real.sent_bytes.sum()) / 1e6,
                     "step_error": 0.5, "comm_error": 0.5})
    rows.append({**rows[-1], "strategy": "refused", "real_step_ms": float("nan"), "step_error": float("nan")})
    candidates.append(Candidate("refused", "random", candidates[-1].placement))
    table = pd.DataFrame(rows)
    refitted_table, refitted, fit = refit_to_rounds(g, cluster, candidates, table)
    assert (fit.send_cpu_share, fit.corun_slowdown, fit.error) == (pytest.approx(0.3), 0.2, 0.0)
    assert (refitted.send_cpu_share, refitted.corun_slowdown) == (pytest.approx(0.3), 0.2)
    assert (refitted.latency == cluster.latency).all()  # the calibration's latency kept
    assert list(refitted_table.columns) == list(table.columns)
    measured = refitted_table.iloc[:4]
    assert (measured["step_error"] == 0.0).all() and (measured["comm_error"] == 0.0).all()  # held-out row too
    assert refitted_table.loc[4, "sim_step_ms"] == refitted_table.loc[3, "sim_step_ms"]  # a refused row: simulated
    assert np.isnan(refitted_table.loc[4, "step_error"])  # ... and still unmeasured
    # two fit-set rows are too few to fit: everything as it was
    few = table[table["source"].isin(["m-etf", "random"])]
    same_table, same_cluster, none = refit_to_rounds(g, cluster, candidates, few)
    assert none is None and same_cluster is cluster and same_table is few

def test_step_sync_drift_is_the_median_gap_of_the_fit_sets_split_rows():
    from trinity.runtime.validate import step_sync_drift_us

    def table(gaps):  # (source, calibration set, MB crossed, measured - simulated ms); every simulation 100 ms
        return pd.DataFrame([{"strategy": f"s{i}", "source": src, "calibration_set": cal, "real_crossed_MB": mb,
                              "sim_step_ms": 100.0, "real_step_ms": 100.0 + gap}
                             for i, (src, cal, mb, gap) in enumerate(gaps)])

    rows = [("metis", True, 5.0, 1.0), ("m-etf", True, 2.0, 10.0), ("expert", True, 9.0, 4.0),
            ("m-topo", True, 0.0, 70.0),  # fit set, but nothing crossed: not a step over both workers
            ("single", True, 0.0, 50.0),  # the rounds' anchor: fitted to nothing
            ("random", False, 3.0, 100.0)]  # held out: never fitted
    assert step_sync_drift_us(table(rows)) == pytest.approx(4000.0)
    assert step_sync_drift_us(table(rows[1:])) != step_sync_drift_us(table(rows[1:]))  # 2 split rows: too few, NaN
    faster = [(src, cal, mb, -gap) for src, cal, mb, gap in rows]  # splits faster than simulated: below 0
    assert step_sync_drift_us(table(faster)) == pytest.approx(-4000.0)
    held = [*rows[:-1], ("random", False, 3.0, -500.0)]  # a held-out row moves nothing
    assert step_sync_drift_us(table(held)) == pytest.approx(4000.0)


@pytest.mark.parametrize("drift_ms", [3.0, -0.5])  # below 0: the splits ran faster than the calibration's model
def test_sync_to_rounds_adds_the_drift_to_the_step_sync_term_and_simulates_every_row_again(drift_ms):
    from trinity.runtime.calibrate import times_scaled
    from trinity.runtime.validate import Candidate, error_summary, sync_to_rounds
    from trinity.sim import Simulator

    g, cluster, _, _ = fit_case(latency_scale=1.0, step_sync_us=50.0)
    names = {"round-robin": "round-robin", "m-etf": "m-etf", "metis": "metis", "random": "held-out"}
    candidates = [Candidate(name, source, place(source, g, cluster, **({"seed": 1} if source == "random" else {}))
                            .placement) for source, name in names.items()]
    # the rounds ran the op times 2x the calibration's and every step over both workers drift_ms slower
    truth = Simulator(times_scaled(g, 2.0), dataclasses.replace(cluster, step_sync_us=50.0 + drift_ms * 1e3))
    before = Simulator(times_scaled(g, 2.0), cluster)
    rows = []
    for c in candidates:
        real, sim = truth.simulate(c.placement), before.simulate(c.placement)
        assert len(set(c.placement)) == 2  # every one a step over both workers
        rows.append({"strategy": c.name, "source": c.source, "calibration_set": c.source != "random",
                     "anchor_scale": 2.0, "sim_step_ms": sim.step_time_us / 1e3, "sim_comm_MB": 0.0,
                     "real_step_ms": real.step_time_us / 1e3, "real_crossed_MB": float(real.sent_bytes.sum()) / 1e6,
                     "step_error": 0.5, "comm_error": 0.5, "overridden": 0})
    table = pd.DataFrame(rows)
    synced, drift = sync_to_rounds(g, cluster, candidates, table)
    assert drift == pytest.approx(drift_ms * 1e3)
    assert list(synced.columns) == [*table.columns, "step_sync_drift_ms", "sync_added_ms"]
    assert synced["step_sync_drift_ms"].tolist() == pytest.approx([drift_ms] * 4)
    assert synced["sync_added_ms"].tolist() == pytest.approx([drift_ms] * 4)
    assert synced["sim_step_ms"].tolist() == pytest.approx((table["sim_step_ms"] + drift_ms).tolist())
    assert synced["step_error"].abs().max() == pytest.approx(0.0, abs=1e-12)  # the held-out row too
    summary = error_summary(synced)  # the held-out row before: drift_ms off its measurement
    assert summary["step_sync_drift_ms"] == pytest.approx(drift_ms)
    assert summary["held_out_split_unsynced_step_error_median"] == pytest.approx(abs(drift_ms)
                                                                                 / table["real_step_ms"].iloc[3])
    assert summary["held_out_split_step_error_median"] == pytest.approx(0.0, abs=1e-12)
    again, drift_again = sync_to_rounds(g, cluster, candidates, synced)  # anchoring an anchored table: the same
    assert drift_again == pytest.approx(drift) and np.allclose(again["sim_step_ms"], synced["sim_step_ms"], rtol=1e-12)
    assert np.allclose(again["sync_added_ms"], synced["sync_added_ms"], rtol=1e-9)
    same, nan = sync_to_rounds(g, cluster, candidates, table.iloc[2:])  # one fit-set row: too few, as it was
    assert nan != nan and same.equals(table.iloc[2:])


def test_blended_strategies_move_the_differing_groups_in_topological_order():
    from trinity.runtime.validate import blended_strategies

    # a chain a -> b -> c -> d; b and c one colocation group; start: all on 0, end: b, c, d on 1
    from trinity.graph.ir import Edge, Op, OpGraph

    g = OpGraph([Op("a", "A", 1.0), Op("b", "B", 1.0, colocation_group="bc"), Op("c", "C", 1.0, colocation_group="bc"),
                 Op("d", "D", 1.0)], [Edge("a", "b", None), Edge("b", "c", None), Edge("c", "d", None)])
    start, end = np.zeros(4, np.int64), np.array([0, 1, 1, 1])
    blends = blended_strategies(g, start, end, 3, name="x")  # 2 differing groups: 0.5, 1, 1.5 -> 0, 1, 2 moved
    assert [(c.name, c.source, list(c.placement)) for c in blends] == [("x-2of4", "blend", [0, 1, 1, 0]),
                                                                       ("x-3of4", "blend", [0, 1, 1, 1])]


def test_traced_steps_pool_their_records_and_count_what_none_recorded():
    from trinity.runtime.runner import Measurement

    m = Measurement("s")
    expected = {"edge_1_a", "edge_2_b", "edge_3_c"}
    m.add_trace(expected, {"edge_1_a": 1000, "edge_2_b": 0}, [5, 6], [])  # c lost, b a control tensor
    assert (m.crossed_bytes, m.transfers, m.transfers_missing, m.traces) == (1000, 1, 1, 1)
    m.add_trace(expected, {"edge_3_c": 300}, [7, 2], [])  # a's and b's records lost this time: pooled, c found
    assert (m.crossed_bytes, m.transfers, m.transfers_missing, m.traces) == (1300, 2, 0, 2)
    assert m.peak_memory_bytes == [7, 6]  # each device's largest
    summary = m.summary()
    assert (summary["real_crossed_MB"], summary["real_transfers"], summary["real_transfers_missing"]) == (0.0013, 2, 0)
    nothing_crosses = Measurement("u")
    nothing_crosses.add_trace(set(), {}, [9, 0], [])
    assert (nothing_crosses.transfers, nothing_crosses.transfers_missing) == (0, 0)
    assert nothing_crosses.peak_memory_bytes == [9, 0]


def test_trace_transfers_expect_each_recv_between_workers_and_read_the_records_by_edge_name():
    tf = pytest.importorskip("tensorflow")
    from trinity.runtime.runner import trace_transfers

    w0, w1, client = task_device(0), task_device(1), "/job:localhost/replica:0/task:0/device:CPU:0"
    md = tf.compat.v1.RunMetadata()
    pg = md.partition_graphs.add()
    for op, tensor, src, dst in (("_Recv", "edge_12_a", w0, w1), ("_HostRecv", "edge_13_shape", w0, w1),
                                 ("_Recv", "edge_14_b", w1, w0), ("_Recv", "edge_15_feed", client, w0),
                                 ("_Send", "edge_16_c", w0, w1), ("_Recv", "edge_17_same", w1, w1)):
        node = pg.node.add(name=f"recv_{tensor}", op=op, device=dst)
        node.attr["tensor_name"].s = tensor.encode()
        node.attr["send_device"].s, node.attr["recv_device"].s = src.encode(), dst.encode()
    dev = md.step_stats.dev_stats.add(device=w1)
    for label, nbytes in ((f"[1000B] [0.1Gb/s] edge_12_a from {w0} to {w1}", 1000),
                          (f"[16B] [0.1Gb/s] edge_13_shape from {w0} to {w1}", 16),
                          (f"[0B] [0.000000Mb/s] edge_15_feed from {client} to {w0}", 0)):
        ns = dev.node_stats.add(node_name="RecvTensor", timeline_label=label)
        if nbytes:
            ns.output.add().tensor_description.allocation_description.requested_bytes = nbytes
    # a, the shape and b cross between the workers (the client's feed, a send and a same-device recv do not);
    # worker 0's record of b is lost
    expected, recorded = trace_transfers(md, [w0, w1])
    assert expected == {"edge_12_a", "edge_13_shape", "edge_14_b"}
    assert recorded == {"edge_12_a": 1000, "edge_13_shape": 16}


def test_interleaved_rounds_trace_again_while_a_crossing_has_no_record(tiny, workers, monkeypatch):
    import trinity.runtime.runner as runner_module

    _, g, gd = tiny
    runner = Runner(g, gd, workers, timeout_s=60)
    rr = place("round-robin", g, runner.cluster).placement
    real, calls = runner_module._trace_figures, []

    def losing_the_first_two(*args):
        expected, recorded, peak, overridden = real(*args)
        calls.append(len(expected))
        return expected, (recorded if len(calls) > 2 else {}), peak, overridden

    monkeypatch.setattr(runner_module, "_trace_figures", losing_the_first_two)
    m = runner.measure_interleaved({"round-robin": rr}, rounds=5, steps=1, warmup=0, progress=False)["round-robin"]
    # rounds 1-2 traced and lost everything, round 3 traced and recorded it all, rounds 4-5 not traced
    assert m.traces == 3 and calls[0] > 0 and m.transfers_missing == 0 and m.transfers > 0


def test_workers_start_again_on_fresh_ports_when_a_picked_one_is_taken(monkeypatch):
    """A port picked here can be taken by another process before the workers bind it (CI saw "Could not start
    gRPC server"): the workers start again on fresh ports; a port the caller gave stays the caller's error."""
    with socket.socket() as held:
        held.bind(("localhost", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, free_port()])
        monkeypatch.setattr(workers_module, "free_port", lambda: next(picks))
        with LocalWorkers(1) as workers:
            assert workers.hosts != [f"localhost:{taken}"]
            workers.check()
        with pytest.raises(WorkerError, match=f"port {taken} is already taken"):
            LocalWorkers(1, ports=[taken])


def test_rank_correlation_is_spearmans_with_ties_sharing_their_mean_rank():
    from trinity.runtime.validate import rank_correlation

    assert rank_correlation([1.0, 2.0, 3.0], [10.0, 30.0, 20.0]) == pytest.approx(0.5)  # ranks 1,2,3 against 1,3,2
    assert rank_correlation([3.0, 2.0, 1.0], [2.0, 2.0, 1.0]) == pytest.approx(np.sqrt(3) / 2)  # (2.5, 2.5, 1)
    assert rank_correlation([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert np.isnan(rank_correlation([1.0, 2.0], [1.0, 2.0]))  # two points always agree: no evidence


def test_placed_on_two_workers_places_each_placer_and_refuses_other_clusters(tiny):
    from trinity.runtime.runner import placed_on_two_workers

    path, g, graph_def = tiny
    graph, gd, placed = placed_on_two_workers(path, "p100x2", ["single", "metis"])
    assert graph.n_ops == g.n_ops and gd == graph_def and list(placed) == ["single", "metis"]
    assert (placed["single"] == 0).all() and set(placed["metis"]) <= {0, 1}
    with pytest.raises(PlacementError, match="has 4 devices for 2 workers") as err:
        placed_on_two_workers(path, "p100x4", ["single"])
    assert err.value.field == "--cluster" and err.value.source == "p100x4"


@pytest.mark.parametrize("option, value, message", [("--retime-above", "1.5", "must be a share between 0 and 1"),
                                                    ("--retime-above", "a lot", "expected a number"),
                                                    ("--retries", "-1", "must be >= 0")])
@pytest.mark.parametrize("command", ["validate", "calibrate"])  # the calibration's fit set is timed again too
def test_cli_refuses_bad_retiming_before_starting_workers(tiny, tmp_path, capsys, monkeypatch, option, value, message,
                                                          command):
    path, _, _ = tiny

    def no_workers(*args, **kwargs):
        raise AssertionError("workers were started")

    monkeypatch.setattr(workers_module, "open_workers", no_workers)
    monkeypatch.setattr(workers_module, "LocalWorkers", no_workers)
    with pytest.raises(SystemExit) as exited:
        main([command, str(path), *(["--placers", "single"] if command == "validate" else []), option, value])
    assert exited.value.code == 2 and message in capsys.readouterr().err
