"""The whole training step timed on its own (trinity.profile.whole_step) and data parallelism's computation
term taken from it (trinity.data_parallel.cost)."""

import json

import pytest

from trinity.cluster import cluster_from_dict
from trinity.data_parallel import DataParallelError, DataParallelWork, step_cost
from trinity.data_parallel.cost import compute_us
from trinity.errors import FormatError, TrinityError
from trinity.profile.layers import Layer, LayerProfile
from trinity.profile.whole_step import WholeStepProfile, profile_whole_step, sample_counts

TINY_LM = {"seq_len": 8, "vocab_size": 50, "d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 2}


def _profile(model="m", server=0.0, worker=0.0):
    return WholeStepProfile(model=model, batch=4, samples=(1, 2, 4), step_us=(10.0, 14.0, 30.0),
                            server_exchange_us=server, worker_exchange_us=worker)


def test_interpolated_between_counts_and_proportional_outside():
    p = _profile()
    assert [p.us(s) for s in (1, 2, 4)] == [10.0, 14.0, 30.0]
    assert p.us(3) == 22.0  # halfway from 14 to 30
    assert p.us(1.5) == 12.0
    assert p.us(8) == 60.0 and p.us(0.5) == 5.0 and p.us(0) == 0.0  # in proportion beyond the ends


def test_sample_counts_are_powers_of_two_and_the_batch():
    assert sample_counts(8) == [1, 2, 4, 8]
    assert sample_counts(6) == [1, 2, 4, 6]
    assert sample_counts(1) == [1]


def test_round_trip_and_bad_files_name_the_field(tmp_path):
    path = tmp_path / "profile.json"
    _profile(server=3.5, worker=1.5).save(path)
    assert WholeStepProfile.load(path) == _profile(server=3.5, worker=1.5)
    good = json.loads(path.read_text())
    for key, value, field in (("samples", [2, 1, 4], "samples"), ("step_us", [10.0, 14.0], "step_us"),
                              ("step_us", [10.0, -1.0, 3.0], "step_us"), ("batch", 0, "batch"),
                              ("samples", [1, 2.5, 4], "samples"), ("worker_exchange_us", -1, "worker_exchange_us"),
                              ("server_exchange_us", "x", "server_exchange_us")):
        path.write_text(json.dumps({**good, key: value}))
        with pytest.raises(FormatError) as e:
            WholeStepProfile.load(path)
        assert e.value.field == field and str(path) in str(e.value)
    with pytest.raises(TrinityError, match="increasing"):
        WholeStepProfile(model="m", batch=4, samples=(2, 1), step_us=(1.0, 2.0))


def test_profile_times_every_count_of_a_real_model():
    p = profile_whole_step("transformer_lm", 4, steps=2, warmup=0, **TINY_LM)
    assert p.samples == (1, 2, 4) and p.batch == 4 and p.steps == 2 and p.options["d_model"] == 16
    assert all(t > 0 for t in p.step_us)
    # the server quantizes, steps and dequantizes; a worker only dequantizes
    assert p.server_exchange_us > p.worker_exchange_us > 0 and p.exchange_bits == 8
    for bad, field in (({"steps": 0}, "steps"), ({"exchange_bits": 40}, "exchange_bits")):
        with pytest.raises(TrinityError) as e:
            profile_whole_step("transformer_lm", 4, **bad, **TINY_LM)
        assert e.value.field == field


def test_computation_term_comes_from_the_whole_step():
    cluster = cluster_from_dict({"name": "t", "devices": [
        {"name": f"d{i}", "speed": s, "memory_GB": 1, "node": "n0"} for i, s in enumerate((1.0, 0.5))],
        "default_link": {"bandwidth_GBps": 1e-3, "latency_us": 0}})
    layers = LayerProfile(model="m", batch=4, layers=(Layer("a", 4.0, 4.0, 4000, 16, 0),))
    linear = DataParallelWork.from_layers(layers, batch=6)  # 2 us per sample
    whole = DataParallelWork.from_layers(layers, batch=6, whole_step=_profile())
    # equal shares of 3 samples: 6 us from the layers; 22 us from the whole step; / speed 0.5 on d1
    assert compute_us("ddp", cluster, linear).tolist() == [6.0, 12.0]
    assert compute_us("ddp", cluster, whole).tolist() == [22.0, 44.0]
    # H-PS: shares 4 and 2 by speed: 30 us and 14 / 0.5
    assert compute_us("hps", cluster, whole).tolist() == [30.0, 28.0]
    # with its exchange's CPU on each rank's core: the server's 4 us, the worker's 2 us / 0.5
    busy = DataParallelWork.from_layers(layers, batch=6, whole_step=_profile(server=4.0, worker=2.0))
    assert compute_us("hps", cluster, busy).tolist() == [34.0, 32.0]
    assert compute_us("ddp", cluster, busy).tolist() == [22.0, 44.0]  # a synchronous method has no such thread
    # H-PS's exchange: gloo's reduce of 4000 bytes (a ring step of 2000 bytes, then d1's 2000-byte chunk to d0:
    # 4000 us at 1 byte/us), the 8-bit pull of 1000 bytes (1000 us), then its own CPU: the server's 4 us and
    # the worker's 2 us / 0.5; the 34 us of computation hide behind it, all but the epoch's last
    assert step_cost("hps", cluster, busy).step_time_us == pytest.approx(5000 + 4 + 4)
    assert step_cost("hps", cluster, busy, epoch_steps=10).step_time_us == pytest.approx(5008 + 34 / 10)
    assert step_cost("hps", cluster, linear).step_time_us == pytest.approx(5000)  # no profile: the layers' update
    # ddp: the slowest rank's 44 us, then a ring of 2 over 1 byte/us: 2 steps of 2000 bytes
    assert step_cost("ddp", cluster, whole).step_time_us == pytest.approx(44 + 4000)
    with pytest.raises(DataParallelError) as e:
        DataParallelWork.from_layers(layers, whole_step=_profile("other"))
    assert e.value.field == "whole_step"
