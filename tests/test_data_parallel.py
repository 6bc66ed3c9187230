"""Data parallelism: DASO's blend and schedule, H-PS's shares and quantizer, the cost model, real runs."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest
import torch

from trinity.cluster import cluster_from_dict, load_cluster
from trinity.data_parallel import (DasoConfig, DasoSchedule, DataParallelError, DataParallelWork, HpsConfig,
                                   Plateau, TrainConfig, batch_shares, blend, check_shares, dequantize,
                                   epoch_plan, error_bound, precision_for, quantize, step_cost,
                                   time_to_target, train)
from trinity.data_parallel.cost import _reduce_us, compute_us
from trinity.errors import ClusterError
from trinity.runtime.links import LinkSpec
from trinity.runtime.workers import WorkerError


# ---------------------------------------------------------------- DASO: blend
def test_blend_matches_hand_computed_values():
    # S = 1, P = 2: (2*1*x + sum) / (2 + 2): x = 3, sum = 3 + 5 = 8 -> (6 + 8) / 4 = 3.5
    assert blend(3.0, 8.0, 1, 2) == 3.5
    # S = 2, P = 4: (4 x + sum) / 8: x = 1, sum = 10 -> 14 / 8
    assert blend(1.0, 10.0, 2, 4) == 14 / 8
    # blocking (S = 0): plain average, the local copy ignored
    assert blend(123.0, 8.0, 0, 2) == 4.0
    t = blend(torch.tensor([1.0, 2.0]), torch.tensor([4.0, 6.0]), 1, 2)
    assert torch.equal(t, torch.tensor([(2 + 4) / 4, (4 + 6) / 4]))
    with pytest.raises(DataParallelError, match="n_global"):
        blend(1.0, 1.0, 1, 0)


# ---------------------------------------------------------------- DASO: schedule
def test_plateau_needs_more_than_patience_bad_epochs_at_5_percent():
    p = Plateau(patience=2, threshold=0.05)
    # 1.0 improves (best inf); 0.96 is not 5% better than 1.0: bad 1, 2, 3 -> plateau on the third
    assert [p.update(v) for v in (1.0, 0.96, 0.97, 0.99)] == [False, False, False, True]
    assert p.bad_epochs == 0 and p.best == 1.0
    assert p.update(0.9) is False and p.best == 0.9  # 10% better: improving


def test_schedule_warmup_cycling_plateaus_reset_and_cooldown():
    s = DasoSchedule(DasoConfig(warmup_epochs=2, cooldown_epochs=2), total_epochs=30)
    assert s.state == (0, 0, 0)  # warm-up: blocking
    assert s.end_epoch(2.0) == (0, 0, 0)  # epoch 1 of 2 done
    assert s.end_epoch(1.0) == (4, 1, 1)  # warm-up over: B=4, local skip 1, S=1 (1.0 is the plateau's best)
    states = [s.end_epoch(1.0) for _ in range(9)]
    # 3 bad epochs per plateau; plateau 1: B 4->2, skip 1//2 -> 1 (kept >= 1), S 1-1 -> 1 (kept >= 1);
    # plateau 2: B 2->1; plateau 3 at B=1: reset B=8, local skip = S = 8 // 4 = 2
    assert states == [(4, 1, 1), (4, 1, 1), (2, 1, 1), (2, 1, 1), (2, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                      (8, 2, 2)]
    assert [s.end_epoch(1.0) for _ in range(3)] == [(8, 2, 2), (8, 2, 2), (4, 1, 1)]  # 8//2, 2//2, 2-1
    s.epoch = 27
    assert s.end_epoch(0.1) == (0, 0, 0)  # epoch 28 of 30 done: the last 2 epochs cool down, blocking


def test_epoch_plan_sends_receives_rotates_and_ends_blocking():
    plans = epoch_plan(10, global_skip=4, local_skip=2, wait=2, n_local=2)
    sends = [(p.batch, p.send_group, p.wait) for p in plans if p.send_group is not None]
    assert sends == [(0, 0, 2), (4, 1, 2), (8, 0, 1)]  # S cut to 1 at batch 8: received by the last batch
    assert {p.batch: p.receive for p in plans if p.receive} == {2: (0,), 6: (4,), 9: (8,)}
    assert [p.batch for p in plans if p.blocking_group is not None] == [9]
    assert plans[9].blocking_group == 1  # fourth global sync of the epoch: group 3 % 2
    assert [p.local_sync for p in plans] == [True, False, True, False, True, False, True, False, True, True]
    blocking = epoch_plan(3, global_skip=0, local_skip=0, wait=0, n_local=2)
    assert [(p.blocking_group, p.local_sync) for p in blocking] == [(0, True), (1, True), (0, True)]


# ---------------------------------------------------------------- H-PS: shares and quantizer
def test_batch_shares_follow_speed_and_add_up():
    assert batch_shares([1, 1, 1, 1], 64) == [16, 16, 16, 16]
    assert batch_shares([3, 3, 3, 1], 64) == [19, 19, 19, 7]  # 19.2 x 3, 6.4: 19, 19, 19, 6 + the largest fraction
    assert batch_shares([2, 1], 10) == [7, 3]  # 6.67, 3.33: 6, 3 + 1 to the .67
    assert batch_shares([1000, 1], 4) == [3, 1]  # 3.996, 0.004: the second raised to 1
    assert batch_shares([1, 1, 1, 1], 5) == [2, 1, 1, 1]  # ties go to the lower index
    with pytest.raises(DataParallelError, match="speeds"):
        batch_shares([1, 0], 8)
    with pytest.raises(DataParallelError, match="batch"):
        batch_shares([1, 1, 1], 2)


def test_uneven_or_zero_shares_refused():
    assert check_shares([3, 5], 8) == [3, 5]
    with pytest.raises(DataParallelError, match="shares: every worker needs at least 1"):
        check_shares([8, 0], 8)
    with pytest.raises(DataParallelError, match="add up to 7, not the batch of 8"):
        check_shares([3, 4], 8)
    with pytest.raises(DataParallelError, match="shares"):
        check_shares([2.5, 5.5], 8)


@pytest.mark.parametrize("bits", [2, 4, 8, 12, 16])
def test_quantizer_error_bound(bits):
    x = torch.randn(1000, generator=torch.Generator().manual_seed(bits)) * 3
    q = quantize(x, bits)
    err = float((dequantize(q) - x).abs().max())
    bound = error_bound(x, bits)
    assert bound == pytest.approx((float(x.max()) - float(x.min())) / (2 ** bits - 1) / 2)
    assert err <= bound * (1 + 1e-5) + 1e-6  # half a step, plus float32 rounding of the result
    assert q.nbytes == 1000 * (1 if bits <= 8 else 2) + 8


def test_quantizer_exact_cases_and_precision_rule():
    x = torch.tensor([0.0, 1.0, 2.0, 3.0])
    q = quantize(x, 2)  # 4 levels over [0, 3]: step 1, every value exact
    assert q.codes.tolist() == [0, 1, 2, 3] and torch.equal(dequantize(q), x)
    assert torch.equal(dequantize(quantize(torch.full((3,), 7.5), 8)), torch.full((3,), 7.5))
    for bad in (1, 17, 0, 32, 8.0, True):
        with pytest.raises(DataParallelError, match="bits: quantization precision must be an integer in"):
            quantize(x, bad)
    assert precision_for([]) == 8 and precision_for([2.0, 1.0, 0.5]) == 8
    assert precision_for([2.0, 1.0, 0.99, 0.5]) == 16  # 1% < 5% once: fine from then on
    with pytest.raises(DataParallelError, match="hps.coarse_bits"):
        HpsConfig(coarse_bits=1).validate()


# ---------------------------------------------------------------- cluster nodes and cost model
def test_cluster_node_field_round_trips_and_is_validated():
    c = load_cluster("cpu2x2")
    assert c.nodes == ["node0", "node0", "node1", "node1"]
    assert cluster_from_dict(c.to_dict()).nodes == c.nodes
    plain = load_cluster("cpu4")
    assert plain.nodes == plain.device_names and "node" not in plain.to_dict()["devices"][0]
    doc = c.to_dict()
    doc["devices"][1]["node"] = ""
    with pytest.raises(ClusterError, match=r"devices\[1\]\.node"):
        cluster_from_dict(doc)


def _two_by_two(lat_in=0.0, lat_out=100.0, bw_in=1e3, bw_out=10.0, speeds=(1, 1, 1, 1)):
    return cluster_from_dict({"name": "t", "devices": [
        {"name": f"d{i}", "speed": s, "memory_GB": 1, "node": f"n{i // 2}"} for i, s in enumerate(speeds)],
        "default_link": {"bandwidth_GBps": bw_out / 1e3, "latency_us": lat_out},
        "links": [{"src": "d0", "dst": "d1", "bandwidth_GBps": bw_in / 1e3, "latency_us": lat_in},
                  {"src": "d2", "dst": "d3", "bandwidth_GBps": bw_in / 1e3, "latency_us": lat_in}]})


def test_cost_model_hand_computed():
    c = _two_by_two()  # inter-node: 100 us + b / (10 bytes/us); intra: 0 us + b / (1000 bytes/us)
    w = DataParallelWork(us_per_sample=10.0, param_bytes=4000.0, batch=40)
    ddp = step_cost("ddp", c, w)
    # compute 10 * 10 = 100 us; ring d0-d1-d2-d3-d0: 6 steps of (100 + 1000 / 10) = 1200 us
    assert ddp.step_time_us == pytest.approx(1300) and ddp.comm_us == pytest.approx(1200)
    assert ddp.sent_bytes.tolist() == [6000.0] * 4
    ps = step_cost("ps", c, w)
    # up, gloo's reduce: ring d0<-d1<-d2<-d3<-d0, 3 steps of (100 + 1000 / 10) = 600, then the 1000-byte chunks
    # to d0: 100 + 1000/1000 + 2 * 1000/10 = 301; down: 100 + 4000/1000 + 2 * 4000/10 = 904; compute 100
    assert ps.step_time_us == pytest.approx(100 + 901 + 904) and ps.comm_us == pytest.approx(1805)
    assert ps.sent_bytes.tolist() == [12000.0, 4000.0, 4000.0, 4000.0]
    daso = step_cost("daso", c, w, global_skip=4, wait=1)
    # local ring in a node: 2 * (0 + 2000 / 1000) = 4; base 104; global ring of 2: 2 * (100 + 2000 / 10) = 600;
    # exposed 600 - 104 = 496, node broadcast 4000 / 1000 = 4; step = 104 + (496 + 4) / 4 = 229
    assert daso.step_time_us == pytest.approx(229)
    hps = step_cost("hps", _two_by_two(speeds=(1, 1, 1, 0.5)), w, bits=8)
    # shares: 40 * (2/7, 2/7, 2/7, 1/7) = 11.43 x 3, 5.71 -> 11, 11, 11, 5 + 2: [12, 11, 11, 6]
    # compute max(120, 110, 110, 6 * 10 / 0.5) = 120; up 901, down 100 + 1000/1000 + 2 * 1000/10 = 301: max(120, 1202)
    assert hps.step_time_us == pytest.approx(1202) and hps.lower_bound_us == pytest.approx(400 / 3.5)
    assert hps.memory_bytes[0] > hps.memory_bytes[1]  # the server's master copy
    # the computation term alone: equal shares of 10 samples; H-PS's speed-proportional [12, 11, 11, 6]
    assert compute_us("ddp", _two_by_two(speeds=(1, 1, 1, 0.5)), w).tolist() == [100.0, 100.0, 100.0, 200.0]
    assert compute_us("hps", _two_by_two(speeds=(1, 1, 1, 0.5)), w).tolist() == [120.0, 110.0, 110.0, 120.0]
    with pytest.raises(DataParallelError, match="method"):
        step_cost("nope", c, w)


def test_reduce_is_gloo_ring_reduce_scatter_then_gather():
    c = _two_by_two()
    # 3 ring steps of (100 + 1000 / 10), then d1's chunk over the node (1000 / 1000) and d2's, d3's over the link
    assert _reduce_us(c, 0, 4000.0) == pytest.approx(3 * 200 + 100 + 1 + 2 * 100)
    # a star of whole gradients would be 100 + 4 + 2 * 400 = 904: the ring moves 3/4 n, the gather n/4 per rank
    assert _reduce_us(_two_by_two(), 0, 4000.0) < 904
    one = cluster_from_dict({"name": "one", "devices": [{"name": "d0", "memory_GB": 1}],
                             "default_link": {"bandwidth_GBps": 1.0, "latency_us": 0}})
    assert _reduce_us(one, 0, 4000.0) == 0.0


def test_epochs_as_the_worker_runs_them_daso_plan_and_hps_flush():
    c = _two_by_two()  # as test_cost_model_hand_computed: base 104, global sum 600, node broadcast 4
    w = DataParallelWork(us_per_sample=10.0, param_bytes=4000.0, batch=40)
    # 10 batches, B = 4, S = 1: sends at 0, 4, 8 (each 600 - 1 * 104 = 496 exposed), batch 9 blocking (600);
    # 4 broadcasts: step = 104 + (3 * 496 + 600 + 4 * 4) / 10 = 314.4
    daso = step_cost("daso", c, w, global_skip=4, wait=1, epoch_steps=10)
    assert daso.step_time_us == pytest.approx(314.4)
    # bytes: the node ring 4000 a rank a step; 4 syncs in 10 steps, each a global sum (4000 from each node's
    # member) and a node broadcast (4000 more): what the workers counted on local4h (5.6 n a step)
    assert daso.sent_bytes.tolist() == pytest.approx([4000 + 0.4 * 8000, 4000, 4000 + 0.4 * 8000, 4000])
    assert daso.sent_bytes.sum() == pytest.approx(5.6 * 4000)
    # one batch: only the blocking average; steady cycling (no epochs) as before
    assert step_cost("daso", c, w, epoch_steps=1).step_time_us == pytest.approx(104 + 600 + 4)
    assert step_cost("daso", c, w).step_time_us == pytest.approx(229)
    # hps: 10 steps of max(120, 1202) and the last computation not hidden: 1202 + 120 / 10
    hps = step_cost("hps", _two_by_two(speeds=(1, 1, 1, 0.5)), w, bits=8, epoch_steps=10)
    assert hps.step_time_us == pytest.approx(1214)
    assert step_cost("ddp", c, w, epoch_steps=10).step_time_us == pytest.approx(1300)  # every step syncs
    for bad in (0, 2.5, True):
        with pytest.raises(DataParallelError, match="epoch_steps"):
            step_cost("daso", c, w, epoch_steps=bad)


def test_server_step_counts_in_the_ps_step_and_hides_in_the_hps_exchange():
    c, slow = _two_by_two(), _two_by_two(speeds=(1, 1, 1, 0.5))
    w = DataParallelWork(us_per_sample=1000.0, param_bytes=4000.0, batch=40, update_us=50.0)
    # ps: 10 samples x 1000 = 10000, push 901, the server's step 50, pull 904, one after the other
    assert step_cost("ps", c, w).step_time_us == pytest.approx(10000 + 901 + 50 + 904)
    # hps: compute max(12 x 1000, 6 x 1000 / 0.5) = 12000 beside the exchange 901 + 50 + 301: the step is 12000
    hps = step_cost("hps", slow, w, bits=8)
    assert hps.step_time_us == pytest.approx(12000) and hps.comm_us == 0.0
    # with a slow exchange the server's step is on its path: max(120, 901 + 50 + 301)
    fast = DataParallelWork(us_per_sample=10.0, param_bytes=4000.0, batch=40, update_us=50.0)
    hps = step_cost("hps", slow, fast, bits=8)
    # exposed: the step beyond the computation, 1252 - 120, at most the communication 1202
    assert hps.step_time_us == pytest.approx(1252) and hps.comm_us == pytest.approx(1132)


# ---------------------------------------------------------------- real runs (torchrun, 2 local ranks)
def _tiny(**kw) -> TrainConfig:
    base = dict(nproc=2, procs_per_node=1, slow_ranks=(), epochs=1, global_batch=16, hidden=(16,), link=None)
    base.update(kw)
    return TrainConfig.from_dict(base)


def test_ps_weights_equal_ddp_after_one_synchronous_step(tmp_path):
    """Same data, same initial weights, one step: the server's update equals the all-reduce's (float32 sums)."""
    cfg = _tiny()
    got = {}
    for m in ("ddp", "ps"):
        r = train(m, seed=3, config=cfg, out_dir=tmp_path / m, timeout_s=90,
                  extra_args=["--max-steps", "1", "--dump-params"])
        got[m] = np.array(r["params_per_rank"])
    assert np.allclose(got["ddp"][0], got["ddp"][1], atol=0)  # DDP's ranks agree exactly
    assert np.abs(got["ps"] - got["ddp"]).max() <= 1e-6  # tolerance: float32 summation order
    assert np.abs(got["ps"][0] - got["ps"][1]).max() == 0


def test_killed_worker_stops_run_keeps_checkpoint_and_leaves_nothing(tmp_path):
    cfg = _tiny(epochs=3)
    steps = 1437 // 16  # steps per epoch: the kill lands in the second epoch, after one checkpoint
    start = time.monotonic()
    with pytest.raises(WorkerError, match="rank 1 failed"):
        train("daso", seed=0, config=cfg, out_dir=tmp_path, timeout_s=60,
              extra_args=["--die-rank", "1", "--die-step", str(steps + 5)])
    assert time.monotonic() - start < 60
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["epoch"] == 0 and len(state["curve"]) == 1
    marker = str(tmp_path.resolve())
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
            and p.pid != os.getpid()]
    assert left == []
    r = train("daso", seed=0, config=cfg, out_dir=tmp_path, timeout_s=60, resume=True)  # a rerun resumes
    assert r["resumed_from_epoch"] == 1 and [c["epoch"] for c in r["curve"]] == [0, 1, 2]
    # its byte counts are the whole run's, as an uninterrupted run counts them (DASO's are deterministic)
    whole = train("daso", seed=0, config=cfg, out_dir=tmp_path / "whole", timeout_s=60)
    assert r["sent_bytes_per_rank"] == whole["sent_bytes_per_rank"] and r["sent_bytes"] > 0
    # a checkpoint without the counters (an older one) is refused rather than resumed with bytes lost
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    del state["sent_bytes_per_rank"]
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(WorkerError, match="byte counters"):
        train("daso", seed=0, config=cfg, out_dir=tmp_path, timeout_s=60, resume=True)


def test_time_to_target_and_config_errors():
    curve = [{"time_s": 1.0, "val_loss": 0.5}, {"time_s": 2.0, "val_loss": 0.1}, {"time_s": 3.0, "val_loss": 0.05}]
    assert time_to_target(curve, 0.1) == 2.0 and time_to_target(curve, 0.01) is None
    with pytest.raises(DataParallelError, match="procs_per_node"):
        TrainConfig(nproc=4, procs_per_node=3).validate()
    with pytest.raises(DataParallelError, match="daso.nope"):
        TrainConfig.from_dict({"daso": {"nope": 1}})
    with pytest.raises(DataParallelError, match="method"):
        train("sgd", out_dir="/nonexistent")


# ---------------------------------------------------------------- a registered model, ranks as a cluster says
LINK = {"bandwidth_GBps": 2.0, "latency_us": 100}


def test_cluster_train_config_takes_ranks_nodes_and_slowdown_from_the_cluster():
    from trinity.data_parallel.measure import cluster_train_config

    c = cluster_train_config(load_cluster("local4h"), "transformer_lm", 8)
    assert (c.nproc, c.procs_per_node, c.slow_ranks, c.slowdown) == (4, 2, (2, 3), 2.0)
    assert c.link == LinkSpec(bandwidth_MBps=100.0, latency_ms=0.0) and (c.daso.warmup_epochs, c.daso.cooldown_epochs) == (0, 0) and c.global_batch == 8
    nodes = cluster_train_config(load_cluster("cpu2x2"), "transformer_lm", 8)  # 1 ms: 0.9 above loopback's
    assert (nodes.procs_per_node, nodes.slow_ranks, nodes.slowdown) == (2, (), 1.0)
    assert nodes.link == LinkSpec(bandwidth_MBps=100.0, latency_ms=0.9)
    own_nodes = cluster_from_dict({"devices": [{"name": n, "memory_GB": 8} for n in "ab"], "default_link": LINK})
    assert own_nodes.nodes == ["a", "b"] and cluster_train_config(own_nodes, "transformer_lm", 8).link == \
        LinkSpec(bandwidth_MBps=2000.0, latency_ms=0.0)
    one_node = cluster_from_dict({"devices": [{"name": n, "node": "x", "memory_GB": 8} for n in "ab"],
                                  "default_link": LINK})
    assert cluster_train_config(one_node, "transformer_lm", 8).link is None  # loopback only
    with pytest.raises(DataParallelError, match="one factor"):  # speeds 2, 2, 1, 0.5: factors 2 and 4
        cluster_train_config(load_cluster("hetero4"), "transformer_lm", 8)
    split = cluster_from_dict({"devices": [{"name": n, "node": k, "memory_GB": 8} for n, k in
                                           (("a", "x"), ("b", "y"), ("c", "x"), ("d", "y"))],
                               "default_link": LINK})
    with pytest.raises(DataParallelError, match="consecutive"):
        cluster_train_config(split, "transformer_lm", 8)
    with pytest.raises(DataParallelError, match="model"):
        TrainConfig(model="").validate()


def test_measure_step_trains_a_registered_model_with_shares_by_speed(tmp_path):
    from trinity.data_parallel.measure import measure_step

    cluster = cluster_from_dict({"devices": [{"name": "fast", "speed": 1.0, "memory_GB": 8, "node": "n"},
                                             {"name": "slow", "speed": 0.5, "memory_GB": 8, "node": "n"}],
                                 "default_link": LINK})
    r = measure_step("hps", cluster, "transformer_lm", 8, steps=5, out_dir=tmp_path, timeout_s=90,
                     options={"n_layers": 1, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 50})
    assert r["slowdown"] == [1.0, 2.0] and r["step_time_us"] > 0 and r["sent_bytes_per_step"] > 0
    assert sum(r["shares"]) == 8 and r["shares"][0] > r["shares"][1]  # rebalanced after 5 steps
    assert np.isfinite(r["loss"]).all()


# ---------------------------------------------------------------- one strategy per method, kernel-shaped links
def test_every_method_is_one_strategy_module_and_the_worker_names_none():
    import inspect

    from trinity.data_parallel import METHODS, SyncStrategy, strategy_class
    from trinity.data_parallel.train import worker

    assert set(METHODS) == {"ddp", "ps", "daso", "hps"}
    for m in METHODS:
        assert issubclass(strategy_class(m), SyncStrategy) and strategy_class(m) is not SyncStrategy
    worker_source = inspect.getsource(worker)
    assert not [m for m in METHODS if f'"{m}"' in worker_source or f"'{m}'" in worker_source]
    with pytest.raises(DataParallelError, match="unknown method 'sgd'"):
        strategy_class("sgd")


def test_bad_link_and_slowdown_refused_naming_the_field():
    from trinity.runtime.links import LinkError
    with pytest.raises(LinkError, match="link.bandwidth_MBps"):
        TrainConfig.from_dict({"link": {"bandwidth_MBps": 0}})
    with pytest.raises(DataParallelError, match="link.rate"):
        TrainConfig.from_dict({"link": {"rate": 1}})
    with pytest.raises(DataParallelError, match="slowdown"):
        TrainConfig.from_dict({"slowdown": 0.5})
    with pytest.raises(DataParallelError, match="procs_per_node"):
        TrainConfig.from_dict({"nproc": 251, "procs_per_node": 1, "slow_ranks": [], "global_batch": 256})


@pytest.mark.skipif(os.geteuid() != 0, reason="shaped links need root (network namespaces)")
def test_ddp_trains_across_shaped_nodes_and_the_link_is_what_it_costs(tmp_path):
    """2 nodes of 2 ranks; DDP's gradient (1,210 floats of the (16,) MLP, 4 ranks: 7.3 kB sent per rank and
    step) through a 0.2 MB/s port takes tens of ms per step, against well under one on 1000 MB/s."""
    from trinity.runtime.links import LinkSpec, namespaces_of
    times = {}
    for bw in (1000.0, 0.2):
        cfg = _tiny(nproc=4, procs_per_node=2, link={"bandwidth_MBps": bw})
        r = train("ddp", seed=0, config=cfg, out_dir=tmp_path / str(bw), timeout_s=120,
                  extra_args=["--max-steps", "10"])
        times[bw] = r["train_time_s"]
        assert r["sent_bytes_per_rank"][0] == pytest.approx(10 * 2 * 3 / 4 * 1210 * 4 + 2 * 3 / 4 * 16, rel=1e-9)
    assert cfg.link == LinkSpec(0.2)
    assert times[0.2] > times[1000.0] + 10 * 0.01  # >= 10 ms more per step: the shaped port is the cost
    assert namespaces_of(os.getpid()) == []
