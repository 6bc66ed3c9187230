"""Runs that others disturbed are timed again (`Runner.measure_interleaved`'s retime_above), the least
disturbed kept: exact cases on a runner whose runs are scripted, no workers."""

import math

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.runtime.runner import Measurement, Runner
from trinity.runtime.validate import error_summary
from trinity.stages.validate import retiming_of


def _run(name, step_ms, other, steal, edges=None):
    """A run as `Runner.measure` returns it: two timed steps of ``step_ms``, one traced step."""
    m = Measurement(name, step_us=[step_ms * 1e3, step_ms * 1e3], round_median_us=[step_ms * 1e3],
                    loss=[1.0, 0.5], setup_s=2.0, load=[0.5, 0.7], other_cpu=[other], steal=[steal])
    m.add_trace(set(edges or {"a:0"}), {e: 8 for e in (edges or {"a:0"})}, [100, 200], [])
    return m


class ScriptedRunner(Runner):
    """`Runner.measure` replaced by scripted runs: each call takes the next (step ms, other CPU, steal)
    of the strategy's script."""

    def __init__(self, scripts: dict[str, list[tuple[float, float, float]]]):
        self.scripts = {name: list(s) for name, s in scripts.items()}
        self.calls: list[tuple[str, bool]] = []

    def measure(self, placement, name="strategy", *, steps=5, warmup=2, trace=True, into=None, keep_ops=False):
        self.calls.append((name, trace))
        return _run(name, *self.scripts[name].pop(0))


def test_disturbance_is_the_largest_share_others_took_in_one_run():
    m = Measurement("s", other_cpu=[0.01, 0.002, float("nan")], steal=[0.005, 0.03, 0.5])
    assert m.disturbance == pytest.approx(0.032)
    assert math.isnan(Measurement("s").disturbance)


def test_absorb_pools_traces_always_and_times_only_where_timed():
    m = Measurement("s")
    kept = _run("s", 10.0, 0.0, 0.01, {"a:0"})
    m.absorb(kept)
    m.absorb(_run("s", 30.0, 0.0, 0.05, {"b:0"}), kept)
    assert m.step_us == [10e3, 10e3] and m.round_median_us == [10e3]
    assert m.steal == [0.01] and m.other_cpu == [0.0] and m.load == [0.5, 0.7]
    assert m.retimed_disturbance == [0.05]
    assert m.recorded_bytes == {"a:0": 8, "b:0": 8} and m.traces == 2  # bytes do not depend on the load
    assert m.loss == [1.0, 0.5, 1.0, 0.5] and m.setup_s == 4.0
    assert m.retimed_ratio == [3.0]  # the dropped run's median step over the kept one's
    assert m.summary()["retimed"] == 1 and m.summary()["steal_max"] == 0.01
    assert m.summary()["retimed_ratio_median"] == 3.0


def test_a_disturbed_run_is_run_again_and_the_calmest_kept():
    runner = ScriptedRunner({"calm": [(10.0, 0.0, 0.0), (11.0, 0.0, 0.0)],
                             "once": [(20.0, 0.01, 0.04), (12.0, 0.0, 0.01), (13.0, 0.0, 0.0)],
                             "always": [(30.0, 0.0, 0.09), (31.0, 0.0, 0.07), (32.0, 0.0, 0.08),
                                        (33.0, 0.0, 0.0)]})
    p = np.zeros(1, dtype=int)
    out = runner.measure_interleaved({"calm": p, "once": p, "always": p}, rounds=2, steps=2, progress=False,
                                     retime_above=0.02, retries=2)
    # round 1: calm once; once twice (0.05 > 0.02, then 0.01); always three times (every one above), the 0.07
    # kept; round 2 runs in reverse, nobody disturbed
    assert [n for n, _ in runner.calls] == ["calm", "once", "once", "always", "always", "always", "always",
                                           "once", "calm"]
    assert out["calm"].round_median_us == [10e3, 11e3] and out["calm"].retimed_disturbance == []
    assert out["once"].round_median_us == [12e3, 13e3]
    assert out["once"].retimed_disturbance == pytest.approx([0.05])
    assert out["always"].round_median_us == [31e3, 33e3]
    assert out["always"].retimed_disturbance == pytest.approx([0.09, 0.08])
    assert out["always"].retimed_ratio == pytest.approx([30 / 31, 32 / 31]) and out["once"].retimed_ratio == [20 / 12]
    assert math.isnan(out["calm"].summary()["retimed_ratio_median"])
    assert out["always"].steal == [0.07, 0.0]
    assert out["always"].traces == 4  # the retimed runs' traced steps count as well
    assert error_summary(_table(out))["retimed_runs"] == 3


def test_the_progress_line_counts_the_runs_timed_again(capsys):
    runner = ScriptedRunner({"a": [(20.0, 0.0, 0.05), (21.0, 0.0, 0.04), (22.0, 0.0, 0.0)],
                             "b": [(10.0, 0.0, 0.03), (11.0, 0.0, 0.0)]})
    p = np.zeros(1, dtype=int)
    runner.measure_interleaved({"a": p, "b": p}, rounds=1, progress=True, retime_above=0.02, retries=2)
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("timed_again=3")  # a's 2, b's 1


def test_without_a_limit_or_retries_every_run_is_kept_as_it_came():
    p = np.zeros(1, dtype=int)
    for kwargs in ({"retime_above": None}, {"retime_above": 0.02, "retries": 0}):
        runner = ScriptedRunner({"s": [(20.0, 0.0, 0.5)]})
        out = runner.measure_interleaved({"s": p}, rounds=1, progress=False, **kwargs)
        assert out["s"].round_median_us == [20e3] and out["s"].retimed_disturbance == []


def test_a_run_whose_disturbance_is_unknown_is_not_run_again():
    runner = ScriptedRunner({"s": [(20.0, float("nan"), float("nan"))]})
    out = runner.measure_interleaved({"s": np.zeros(1, dtype=int)}, rounds=1, progress=False, retime_above=0.0)
    assert len(runner.calls) == 1 and out["s"].retimed_disturbance == []


@pytest.mark.parametrize("kwargs, field", [({"retime_above": -0.1}, "retime_above"),
                                           ({"retime_above": float("nan")}, "retime_above"),
                                           ({"retries": -1}, "retries"), ({"retries": 1.5}, "retries")])
def test_bad_settings_are_refused_naming_them(kwargs, field):
    with pytest.raises(TrinityError) as err:
        ScriptedRunner({}).measure_interleaved({}, rounds=1, progress=False, **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("validation, field", [({"retime_above": 1.5}, "validation.retime_above"),
                                               ({"retime_above": "a lot"}, "validation.retime_above"),
                                               ({"retime_above": True}, "validation.retime_above"),
                                               ({"retime_above": 0.02, "retries": -2}, "validation.retries"),
                                               ({"retime_above": 0.02, "retries": 0.5}, "validation.retries")])
def test_the_stage_refuses_bad_settings_naming_the_field(validation, field):
    with pytest.raises(TrinityError) as err:
        retiming_of(OmegaConf.create({"validation": validation}))
    assert err.value.field == field


def test_the_stage_passes_its_settings_on():
    assert retiming_of(OmegaConf.create({"validation": {"retime_above": 0.02, "retries": 1}})) == \
        {"retime_above": 0.02, "retries": 1}
    assert retiming_of(OmegaConf.create({"validation": {"retime_above": None}})) == \
        {"retime_above": None, "retries": 2}


def _table(measured: dict[str, Measurement]) -> pd.DataFrame:
    """Rows as `trinity validate` writes them, for `error_summary`."""
    rows = [{**m.summary(), "source": "x", "calibration_set": False, "sim_step_ms": m.median_us / 1e3,
             "sim_comm_MB": 0.0, "step_error": 0.0, "comm_error": 0.0} for m in measured.values()]
    return pd.DataFrame(rows)
