"""PyTorch export (make_fx) and real profiling: exact counts on tiny hand-made models."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.export.torch_graph import export_torch, export_torch_model
from trinity.profile.torch_profile import profile_torch


def _sum_of_squares(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


@pytest.fixture(scope="module")
def tiny() -> OpGraph:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    return export_torch(model, (torch.randn(2, 3),), torch.zeros(2, 4), _sum_of_squares, name="tiny")


def test_tiny_linear_exact_ops_and_edges(tiny):
    g = tiny
    assert Counter(op.type for op in g.ops) == {
        "parameter": 2, "input": 1, "target": 1,
        # forward: x @ W.T + b, relu; loss: (y - t)^2 summed
        "aten.t.default": 4, "aten.addmm.default": 1, "aten.relu.default": 1, "aten.detach.default": 2,
        "aten.sub.Tensor": 3, "aten.pow.Tensor_Scalar": 2, "aten.sum.default": 1,
        # backward: d loss / d y = 2 (y - t), relu mask, dW = g.T @ x, db = sum(g)
        "aten.ones_like.default": 1, "aten.expand.default": 1, "aten.mul.Scalar": 1, "aten.mul.Tensor": 3,
        "aten.threshold_backward.default": 1, "aten.mm.default": 1, "aten.sum.dim_IntList": 1,
        "aten.view.default": 1,
    }
    assert (g.n_ops, g.n_edges) == (28, 32)
    assert g.meta["framework"] == "torch" and g.meta["ops"] == 28 and g.meta["parameters"] == 16
    assert all(not e.is_control and e.src_output == 0 for e in g.edges)


def test_tiny_linear_bytes_flops_and_parameters(tiny):
    g = tiny
    op = {o.name: o for o in g.ops}
    # Forward addmm: (2x3) @ (3x4) -> 2x4 floats; FLOPs 2 * batch * in * out.
    assert op["addmm"].output_bytes == (2 * 4 * 4,) and op["addmm"].flops == 2 * 2 * 3 * 4
    # Weight gradient mm: (4x2) @ (2x3) -> 4x3 floats, same FLOPs.
    assert op["mm"].output_bytes == (4 * 3 * 4,) and op["mm"].flops == 2 * 2 * 3 * 4
    assert g.meta["flops"] == 2 * (2 * 2 * 3 * 4)
    assert op["p_0_weight"].persistent_bytes == 4 * 3 * 4 and op["p_0_bias"].persistent_bytes == 4 * 4
    assert sum(o.persistent_bytes for o in g.ops) == 64
    assert op["input_0"].output_bytes == (2 * 3 * 4,) and op["input_0"].persistent_bytes == 0
    # The SGD update (p - lr * g) takes its parameter's place: colocated, not counted twice.
    assert g.colocation_groups() == {"p_0_weight": ["p_0_weight", "sub_1"], "p_0_bias": ["p_0_bias", "sub_2"]}
    assert op["sub_1"].persistent_bytes == 0
    assert all(o.compute_us is None for o in g.ops)


def test_getitem_folded_into_edges_and_buffers_colocated_with_writer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    g = export_torch(model, (torch.randn(5, 3),), torch.zeros(5, 4), _sum_of_squares, name="bn")
    assert not any("getitem" in op.name or "getitem" in op.type for op in g.ops)
    bn = g.ops[g.index["native_batch_norm"]]
    assert bn.output_bytes == (5 * 4 * 4, 4 * 4, 4 * 4)  # output, saved mean, saved inverse std
    into_backward = {(e.src, e.src_output) for e in g.edges if e.dst == "native_batch_norm_backward"}
    assert {("native_batch_norm", 1), ("native_batch_norm", 2)} <= into_backward
    bn_backward = g.ops[g.index["native_batch_norm_backward"]]
    assert len(bn_backward.output_bytes) == 3
    assert {(e.src_output, e.dst) for e in g.edges if e.src == "native_batch_norm_backward"} == {
        (0, "t_1"), (0, "sum_2"), (1, "mul_4"), (2, "mul_5")}  # grad input feeds two ops
    groups = g.colocation_groups()
    assert groups["b_1_running_mean"] == ["b_1_running_mean", "b_1_running_var", "native_batch_norm"]
    assert groups["b_1_num_batches_tracked"] == ["b_1_num_batches_tracked", "add_"]
    assert g.ops[g.index["b_1_running_var"]].persistent_bytes == 16


def test_lstm_flops_counted_with_onednn_disabled():
    torch.manual_seed(0)
    model = nn.LSTM(4, 8, batch_first=True)
    g = export_torch(model, (torch.randn(2, 5, 4),), torch.zeros(2, 5, 8),
                     lambda out, target: _sum_of_squares(out[0], target), name="lstm")
    assert not any("mkldnn" in op.type for op in g.ops)
    # At least the forward gate matmuls: 2 * batch * steps * 4 hidden * (input + hidden).
    assert g.meta["flops"] >= 2 * 2 * 5 * (4 * 8) * (4 + 8)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * torch.tensor([1.0, 2.0, 3.0])


def test_tensor_created_in_forward_is_a_persistent_constant():
    g = export_torch(_Scaled(), (torch.randn(2, 3),), torch.zeros(2, 3), _sum_of_squares, name="scaled")
    constants = [op for op in g.ops if op.type == "constant"]
    assert [(op.output_bytes, op.persistent_bytes) for op in constants] == [((12,), 12)]


class _Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent: cannot be traced
            return x * 2
        return x


class _Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(3, 3), _Gate(), nn.Linear(3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def test_untraceable_model_names_the_submodule():
    with pytest.raises(TrinityError, match=r"gated: model: cannot trace submodule 'blocks.1' \(_Gate\)") as info:
        export_torch(_Gated(), (torch.randn(2, 3),), torch.zeros(2, 1), _sum_of_squares, name="gated")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, ops, edges", [("transformer_lm", 386, 494), ("resnet_small", 349, 531)])
def test_registered_examples_export_deterministically(name, ops, edges):
    a, b = export_torch_model(name, 2), export_torch_model(name, 2)
    assert (a.n_ops, a.n_edges) == (ops, edges)
    assert a.ops == b.ops and a.edges == b.edges
    assert a.meta["model"] == name and a.meta["batch_size"] == 2
    assert a.meta["flops"] > 0


def test_export_rejects_bad_options():
    with pytest.raises(TrinityError, match="options.depth: unknown option"):
        export_torch_model("resnet_small", 2, depth=3)
    with pytest.raises(TrinityError, match="is a tensorflow model"):
        export_torch_model("inception_v3")


TINY_RESNET = {"widths": (4, 8, 8), "blocks_per_stage": 1, "image_size": 8}


@pytest.fixture(scope="module")
def tiny_resnet() -> OpGraph:
    return export_torch_model("resnet_small", 2, **TINY_RESNET)


def test_profile_gives_positive_times(tiny_resnet):
    g = tiny_resnet
    profiled, report = profile_torch(g, steps=2, warmup=1, progress=False)
    assert [op.name for op in profiled.ops] == [op.name for op in g.ops] and profiled.edges == g.edges
    timed = [op for op in profiled.ops if op.type.startswith("aten.")]
    assert report["ops_timed"] == len(timed) and all(op.compute_us > 0 for op in timed)
    assert all(op.compute_us == 0.0 for op in profiled.ops if not op.type.startswith("aten."))
    assert report["step_us_median"] > 0 and report["ratio_sum_to_step"] > 0
    assert profiled.meta["profile"] == {k: v for k, v in report.items() if k != "observed_ops"}
    assert len(report["observed_ops"]) == report["ops_timed"]


def test_profile_refuses_a_graph_that_does_not_match(tiny_resnet):
    g = tiny_resnet
    other = OpGraph(g.ops, g.edges, name=g.name, meta={**g.meta, "options": {**TINY_RESNET, "blocks_per_stage": 2}})
    with pytest.raises(TrinityError, match="does not match the graph"):
        profile_torch(other, steps=1, warmup=0, progress=False)
