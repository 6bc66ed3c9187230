"""The roofline against measured op times (trinity.profile.speed_check) and the GPU check's script on a CPU."""

import pandas as pd
import pytest
import torch

from conftest import benchmark_script
from trinity.errors import TrinityError
from trinity.export.torch_graph import export_torch_model
from trinity.graph import Edge, Op, OpGraph
from trinity.profile.speed_check import by_type, per_op, returns_view, summarize
from trinity.profile.speed_model import spec
from trinity.profile.torch_profile import profile_torch

P100 = spec("p100")
MM_US = 5 + 2e9 / (9.3e12 * 0.7) * 1e6  # compute-bound (its 7 MB take 12 us)
RELU_US = 5 + 4e6 / (732e9 * 0.8) * 1e6  # memory-bound: 2 MB in, 2 MB out


def timed_graph() -> OpGraph:
    """Two placeholders (never timed), a matmul measured at 400 us, a ReLU at 10, a transpose (a view) at 1 and a
    NoOp that took 2."""
    ops = [Op("x", "Placeholder", 0.0, output_bytes=(4_000_000,)),
           Op("w", "VarHandleOp", 0.0, output_bytes=(1_000_000,)),
           Op("mm", "MatMul", 400.0, flops=2e9, output_bytes=(2_000_000,)),
           Op("relu", "Relu", 10.0, output_bytes=(2_000_000,)),
           Op("t", "aten.t.default", 1.0, output_bytes=(2_000_000,)),
           Op("noop", "NoOp", 2.0)]
    return OpGraph(ops, [Edge("x", "mm"), Edge("w", "mm"), Edge("mm", "relu"), Edge("relu", "t"),
                         Edge("relu", "noop", None)])


def test_views_are_read_from_the_schema():
    views = ["aten.view.default", "aten.t.default", "aten.transpose.int", "aten.expand.default", "aten.detach.default"]
    work = ["aten.mm.default", "aten.clone.default", "aten.add_.Tensor", "MatMul", "aten.no_such_op.default"]
    assert [returns_view(t) for t in views + work] == [True] * 5 + [False] * 5  # add_ writes its input: work


def test_per_op_sets_each_timed_op_beside_its_roofline():
    table = per_op(timed_graph(), P100)
    assert table["op"].tolist() == ["mm", "relu", "t", "noop"]  # placeholders (0 us) were not timed
    assert table["bytes"].tolist() == [7e6, 4e6, 4e6, 0.0]
    assert table["bound"].tolist() == ["compute", "memory", "memory", "none"]
    assert table["view"].tolist() == [False, False, True, False]
    assert table["roofline_us"].tolist() == pytest.approx([MM_US, RELU_US, RELU_US, 0.0], rel=1e-12)
    assert table["ratio"].tolist() == pytest.approx([MM_US / 400, RELU_US / 10, RELU_US, 0.0], rel=1e-12)


def test_summary_by_hand():
    s = summarize(per_op(timed_graph(), P100), step_us=500.0)
    assert s["ops_timed"] == 4 and s["views"] == 1 and s["sum_measured_op_us"] == 413.0
    assert s["measured_us_per_op"] == 125.0
    assert s["roofline_step_us"] == pytest.approx(MM_US + 2 * RELU_US, rel=1e-12)
    assert s["step_error"] == pytest.approx((MM_US + 2 * RELU_US) / 500 - 1, rel=1e-12)
    assert s["roofline_step_us_views_free"] == pytest.approx(MM_US + RELU_US, rel=1e-12)
    assert s["step_error_views_free"] == pytest.approx((MM_US + RELU_US) / 500 - 1, rel=1e-12)
    # ratios 0.78, 1.18, 11.8 and 0; errors 0.22, 0.18, 10.8 and 1
    assert s["median_ratio"] == pytest.approx((MM_US / 400 + RELU_US / 10) / 2, rel=1e-12)
    assert s["median_abs_error"] == pytest.approx((1 - MM_US / 400 + 1) / 2, rel=1e-12)
    assert s["weighted_abs_error"] == pytest.approx((400 - MM_US + RELU_US - 10 + RELU_US - 1 + 2) / 413, rel=1e-12)
    assert s["within_2x"] == 0.5  # the view's 11.8x and the NoOp's 0 are not within 2x


def test_by_type_orders_types_by_measured_time():
    t = by_type(per_op(timed_graph(), P100), top=2)
    assert t["type"].tolist() == ["MatMul", "Relu"]
    assert t["ops"].tolist() == [1, 1]
    assert t["share_of_measured"].tolist() == pytest.approx([400 / 413, 10 / 413])
    assert t["ratio_of_sums"].tolist() == pytest.approx([MM_US / 400, RELU_US / 10])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_profiling_on_a_gpu_that_is_not_there_is_refused():
    g = export_torch_model("resnet_small", 2, widths=(4, 8, 8), blocks_per_stage=1, image_size=8)
    with pytest.raises(TrinityError, match="no CUDA device on this machine") as err:
        profile_torch(g, steps=1, warmup=0, progress=False, device="cuda")
    assert err.value.field == "device"
    script = benchmark_script("speed_model_check")
    with pytest.raises(TrinityError, match="no CUDA device") as err:
        script.main(["--out", "unused"])
    assert err.value.field == "--device"


def test_the_check_runs_end_to_end_on_the_cpu(tmp_path):
    """The GPU check's whole path (export, profile, compare, write, plot) on this machine's CPU."""
    script = benchmark_script("speed_model_check")
    script.main(["--device", "cpu", "--kind", "p100", "--cases", "transformer_lm", "--steps", "1", "--warmup", "0",
                 "--runs", "2", "--out", str(tmp_path)])
    summary = pd.read_csv(tmp_path / "summary.csv")
    ops = pd.read_csv(tmp_path / "per_op.csv")
    assert summary["case"].tolist() == ["transformer_lm"] and summary.loc[0, "device"] == "cpu"
    assert summary.loc[0, "ops_timed"] == len(ops) > 100
    assert summary.loc[0, "roofline_step_us"] == pytest.approx(ops["roofline_us"].sum(), rel=1e-5)
    assert pd.isna(summary.loc[0, "differs_from_cpu_export"])  # the same device: the same ops
    assert (ops["measured_us"] > 0).all() and (tmp_path / "speed_model_check.png").stat().st_size > 0
    assert set(pd.read_csv(tmp_path / "by_type.csv")["case"]) == {"transformer_lm"}
    again = pd.read_csv(tmp_path / "summary_run2.csv")  # the second run: timed again, the same graph
    assert again.loc[0, "ops_timed"] == summary.loc[0, "ops_timed"]
    assert again.loc[0, "roofline_step_us"] == summary.loc[0, "roofline_step_us"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by_type.csv", "by_type_run2.csv", "per_op.csv",
                                                          "speed_model_check.png", "summary.csv", "summary_run2.csv"]


@pytest.mark.parametrize("argv, field, message", [
    (["--cases", "nope"], "--cases", "unknown case 'nope'"),
    (["--device", "tpu"], "--device", "must be cuda or cpu"),
    (["--device", "cpu", "--steps", "0"], "--steps", "need steps >= 1"),
    (["--device", "cpu", "--runs", "0"], "--runs", "must be 1 to 10"),
    (["--device", "cpu", "--kind", "a100"], "speed_models", "no speed model for device kind 'a100'"),
])
def test_bad_input_is_refused_naming_the_field(argv, field, message):
    with pytest.raises(TrinityError, match=message) as err:
        benchmark_script("speed_model_check").main([*argv, "--out", "unused"])
    assert err.value.field == field
