"""TensorFlow export and profiling: a hand-built tiny graph with exact expectations."""

import numpy as np
import pytest

from trinity.errors import TrinityError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.export.tf_graph import export_tf, opgraph_from_graphdef, runnable_graph_def
from trinity.profile import tf_profile
from trinity.profile.tf_profile import estimate_memory_bytes, map_trace_name, profile_tf

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")


def tiny_forward():
    """x[2,3] -> Dense(4) -> logits; "out" = identity(logits) after a control dependency on "barrier"."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.ones((2, 3), np.float32), name="x")
        logits = keras.layers.Dense(4, name="dense")(x)
        barrier = tf.no_op(name="barrier")
        with tf.control_dependencies([barrier]):
            tf.identity(logits, name="out")
    return graph


def tiny_training():
    """The tiny model with a loss and one SGD step; returns (OpGraph, serialized GraphDef)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.random.uniform([2, 3], name="x")
        labels = tf.constant([1, 3], name="labels")
        logits = keras.layers.Dense(4, name="dense")(x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
                              name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op")
        init = tf.compat.v1.global_variables_initializer()
    meta = {"model": "tiny", "batch_size": 2, "train_op": train.name, "init_op": init.name, "loss": loss.name}
    g = opgraph_from_graphdef(graph, fetches=[train.name, loss.name], batch_size=2, name="tiny", meta=meta)
    return g, runnable_graph_def(graph, [train.name, loss.name, init.name]).SerializeToString()


FORWARD_OPS = {
    "x": "Const",
    "dense/kernel": "VarHandleOp",
    "dense/MatMul/ReadVariableOp": "ReadVariableOp",
    "dense/MatMul": "MatMul",
    "dense/bias": "VarHandleOp",
    "dense/BiasAdd/ReadVariableOp": "ReadVariableOp",
    "dense/BiasAdd": "BiasAdd",
    "barrier": "NoOp",
    "out": "Identity",
}


def test_forward_graph_ops_edges_and_bytes():
    g = opgraph_from_graphdef(tiny_forward(), fetches=["out"], batch_size=2)
    assert {op.name: op.type for op in g.ops} == FORWARD_OPS
    assert g.n_edges == 8  # 6 data edges of the Dense layer, logits -> out, barrier -> out
    assert g.meta["counts"] == {"ops": 9, "edges": 8, "control_edges": 1, "unknown_shape_tensors": 0,
                                "ops_with_flops": 2, "loop_back_edges_dropped": 0, "colocation_groups": 2}
    op = {o.name: o for o in g.ops}
    assert op["dense/kernel"].persistent_bytes == 3 * 4 * 4
    assert op["dense/bias"].persistent_bytes == 4 * 4
    assert op["dense/kernel"].output_bytes == (0,)  # a resource handle carries no data
    assert op["dense/MatMul/ReadVariableOp"].output_bytes == (3 * 4 * 4,)
    assert op["dense/BiasAdd"].output_bytes == (2 * 4 * 4,)
    assert op["barrier"].output_bytes == ()


def test_control_edge_is_imported_as_control():
    g = opgraph_from_graphdef(tiny_forward(), fetches=["out"])
    into_out = {(e.src, e.src_output) for e in g.edges if e.dst == "out"}
    assert into_out == {("barrier", None), ("dense/BiasAdd", 0)}
    assert g.edge_bytes(next(e for e in g.edges if e.src == "barrier")) == 0


def test_colocation_groups_hold_variable_and_readers():
    g = opgraph_from_graphdef(tiny_forward(), fetches=["out"])
    assert g.colocation_groups() == {"dense/kernel": ["dense/kernel", "dense/MatMul/ReadVariableOp"],
                                     "dense/bias": ["dense/bias", "dense/BiasAdd/ReadVariableOp"]}
    # The whole graph: initialisers join through loc:@ and the assign/read ops through the handle.
    full = opgraph_from_graphdef(tiny_forward())
    kernel = full.colocation_groups()["dense/kernel"]
    assert {"dense/kernel/Assign", "dense/kernel/Read/ReadVariableOp", "dense/MatMul/ReadVariableOp"} <= set(kernel)
    assert any("Initializer" in name for name in kernel)


def test_matmul_flops_are_tensorflows_registered_2mnk():
    g = opgraph_from_graphdef(tiny_forward(), fetches=["out"])
    op = {o.name: o for o in g.ops}
    assert op["dense/MatMul"].flops == 2 * 2 * 3 * 4
    assert op["dense/BiasAdd"].flops == 2 * 4  # one add per output element
    assert op["x"].flops == 0


def test_unknown_batch_dimension_uses_batch_size_else_counts_unknown():
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.placeholder(tf.float32, [None, 3], name="batch_first")
        tf.compat.v1.placeholder(tf.float32, [3, None], name="ragged")
    g = opgraph_from_graphdef(graph, batch_size=5)
    assert [op.output_bytes for op in g.ops] == [(5 * 3 * 4,), (0,)]
    assert g.meta["counts"]["unknown_shape_tensors"] == 1


def test_profile_tiny_training_step():
    g, graph_def = tiny_training()
    profiled, report = profile_tf(g, graph_def, steps=2, warmup=1, progress=False)
    assert profiled.digest() == g.digest()  # same ops and edges
    assert report["step_us_median"] > 0 and report["sum_op_us"] > 0
    assert report["traced_nodes_per_step"] > 0 and report["unmapped_per_step"] == 0
    assert profiled.meta["profile"]["steps"] == 2
    op = {o.name: o for o in profiled.ops}
    assert op["loss"].compute_us > 0
    assert all(o.compute_us is not None and o.compute_us >= 0 for o in profiled.ops)
    assert op["dense/kernel"].persistent_bytes == 48


def test_profile_refuses_a_model_that_does_not_fit(monkeypatch):
    g, graph_def = tiny_training()
    monkeypatch.setattr(tf_profile, "available_memory_bytes", lambda: 100)
    with pytest.raises(TrinityError, match="does not fit in memory.*smaller batch size"):
        profile_tf(g, graph_def, steps=1, warmup=0, progress=False)


def test_memory_estimate_keeps_tensors_until_their_last_consumer():
    # a -> b -> c and a -> c: a (10 B) lives until c runs, so all three outputs are live at c.
    g = OpGraph([Op("w", "VarHandleOp", persistent_bytes=5), Op("a", "X", output_bytes=(10,)),
                 Op("b", "X", output_bytes=(20,)), Op("c", "X", output_bytes=(30,))],
                [Edge("a", "b"), Edge("b", "c"), Edge("a", "c")])
    assert estimate_memory_bytes(g) == 5 + 10 + 20 + 30
    # Without a -> c, a is freed once b ran: the peak is b + c.
    g = OpGraph(g.ops, [Edge("a", "b"), Edge("b", "c")])
    assert estimate_memory_bytes(g) == 5 + 20 + 30


def test_trace_names_map_back_through_grappler_renames():
    ops = {"a/conv/ShapeN", "gradients/AddN_2", "b/BiasAdd", "n/add_1"}
    assert map_trace_name("b/BiasAdd", ops) == ("b/BiasAdd", True)
    assert map_trace_name("ConstantFolding/a/conv/ShapeN-matshapes-1", ops) == ("a/conv/ShapeN", False)
    assert map_trace_name("gradients/AddN_2/tmp_var_accum_1", ops) == ("gradients/AddN_2", False)
    assert map_trace_name("b/BiasAdd/_12", ops) == ("b/BiasAdd", False)
    assert map_trace_name("n/ArithmeticOptimizer/SimplifyAggregation_Mul_add_1", ops) == ("n/add_1", False)
    assert map_trace_name("elsewhere", ops) == (None, False)


def test_unknown_model_lists_known_models():
    with pytest.raises(TrinityError, match="unknown model 'nope'; known models: .*inception_v3"):
        export_tf("nope")


def test_torch_model_is_refused():
    with pytest.raises(TrinityError, match="torch model"):
        export_tf("resnet_small")


def test_unknown_option_is_refused():
    with pytest.raises(TrinityError, match="unknown option.*hidden"):
        export_tf("nmt_2layer", batch_size=2, hiden=8)


@pytest.mark.parametrize("name, options", [
    ("nmt_2layer", {"vocab_size": 20, "seq_len": 3, "hidden": 8}),
    ("gnmt", {"vocab_size": 20, "seq_len": 3, "hidden": 8, "layers": 3}),
])
def test_small_sequence_models_export_and_profile(name, options):
    g, graph_def = export_tf(name, batch_size=2, **options)
    assert g.meta["options"]["seq_len"] == 3 and g.meta["framework"] == "tensorflow"
    assert g.meta["counts"]["unknown_shape_tensors"] == 0
    assert g.colocation_groups()
    _, report = profile_tf(g, graph_def, steps=1, warmup=1, progress=False)
    assert report["step_us_median"] > 0


@pytest.mark.slow
def test_inception_v3_export_size():
    g, graph_def = export_tf("inception_v3", batch_size=2)
    # The training step (forward, gradients, momentum, batch-norm updates): ~4.1k ops,
    # ~6.3k with the initialisers (the paper's Table 3 counts 12,745 for its graph).
    assert 3800 <= g.n_ops <= 4500
    assert g.meta["graphdef_ops"] > g.n_ops
    assert len(tf.compat.v1.GraphDef.FromString(graph_def).node) == g.meta["graphdef_ops"]
    assert g.meta["counts"]["colocation_groups"] > 500


def test_rejected_option_value_is_a_trinity_error():
    with pytest.raises(TrinityError, match="options: cannot build 'inception_v3': Input size must be at least 75x75"):
        export_tf("inception_v3", batch_size=2, image_size=40)


def test_small_pnasnet_follows_slims_layout():
    g, _ = export_tf("pnasnet_large", batch_size=2, num_cells=2, num_conv_filters=8)
    out = {op.name: op.output_bytes[0] // 4 for op in g.ops if op.name.endswith("_cell_output/concat")}
    # Stem cells at 1/4 and 1/2 of the filters, stride 2; both cells reduce (slim's
    # calc_reduction_layers(2, 2) = [0, 1]), doubling the filters; a cell concatenates 5 blocks.
    assert out == {"pnasnet_large/cell_stem_0_cell_output/concat": 2 * 8 * 8 * 5 * 2,
                   "pnasnet_large/cell_stem_1_cell_output/concat": 2 * 4 * 4 * 5 * 4,
                   "pnasnet_large/cell_0_cell_output/concat": 2 * 2 * 2 * 5 * 16,
                   "pnasnet_large/cell_1_cell_output/concat": 2 * 1 * 1 * 5 * 32}
    assert "pnasnet_large/aux_logits/BiasAdd" in g.index  # the aux head, after cell 2 * 2 // 3 - 1 = 0
    # Random draws: the images, drop path on the 9 operations per cell other than "none", the final dropout.
    assert sum(op.type == "RandomUniform" for op in g.ops) == 1 + 4 * 9 + 1
