"""Per-op features for the placement policy (the paper's section on op embedding).

Each op is described by

* its type, as an id into a fixed vocabulary of common TensorFlow op names
  and ATen ops (0 is reserved for types outside it), so a policy can be
  moved between graphs;
* its compute time, Z-scored over the graph (log first: times span orders
  of magnitude);
* its output size, summed over outputs (log bytes, Z-scored);
* its position in the topological order (Z-scored rank): node2vec sees
  neighbourhoods, not how deep in the step an op sits, which layer-wise and
  list-scheduling placements follow (an addition to the paper's features);
* a node2vec embedding of its position in the (undirected) graph.

Features are cached per graph content and settings in ``cache_dir`` because
node2vec takes seconds to minutes on large graphs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trinity.errors import FormatError
from trinity.fileio import atomic_write_bytes
from trinity.graph.ir import OpGraph

# ~200 op names most common in TensorFlow training graphs, then ATen ops of PyTorch exports.
TF_OPS = """
Abs Add AddN AddV2 All Any ApplyAdam ApplyGradientDescent ApplyMomentum ApplyRMSProp ArgMax Assert Assign
AssignAdd AssignSub AssignVariableOp AvgPool AvgPoolGrad BatchMatMul BatchMatMulV2 BiasAdd BiasAddGrad
BroadcastArgs BroadcastGradientArgs BroadcastTo Cast Ceil ConcatOffset ConcatV2 Const Conv2D
Conv2DBackpropFilter Conv2DBackpropInput Cos Cumsum DepthwiseConv2dNative DepthwiseConv2dNativeBackpropFilter
DepthwiseConv2dNativeBackpropInput DivNoNan Elu EluGrad Enter Equal Erf Exit Exp ExpandDims Fill Floor FloorDiv
FloorMod FusedBatchNorm FusedBatchNormGrad FusedBatchNormGradV3 FusedBatchNormV3 Gather GatherNd GatherV2
Greater GreaterEqual Identity IdentityN IsFinite IsVariableInitialized IteratorGetNext IteratorV2 L2Loss
LSTMBlockCell LSTMBlockCellGrad Less LessEqual Log Log1p LogSoftmax LogicalAnd LogicalNot LogicalOr LoopCond
MatMul Max MaxPool MaxPoolGrad Maximum Mean Merge Min Minimum Mod Mul Neg NextIteration NoOp NotEqual OneHot
OnesLike Pack Pad PadV2 Placeholder PlaceholderWithDefault Pow Prod RandomStandardNormal RandomUniform
RandomUniformInt Range Rank ReadVariableOp RealDiv Reciprocal ReciprocalGrad Relu Relu6 Relu6Grad ReluGrad
Reshape ResizeBilinear ResourceApplyAdam ResourceApplyGradientDescent ResourceApplyKerasMomentum
ResourceApplyMomentum ResourceApplyRMSProp ResourceGather ResourceScatterAdd Reverse ReverseSequence ReverseV2
Round Rsqrt RsqrtGrad SaveV2 RestoreV2 Select SelectV2 Selu Shape ShapeN Sigmoid SigmoidGrad Sign Sin Size
Slice Softmax SoftmaxCrossEntropyWithLogits Softplus SparseSoftmaxCrossEntropyWithLogits Split SplitV Sqrt
SqrtGrad Square SquaredDifference Squeeze StopGradient StridedSlice StridedSliceGrad Sub Sum Switch Tanh
TanhGrad TensorArrayGatherV3 TensorArrayReadV3 TensorArrayScatterV3 TensorArraySizeV3 TensorArrayV3
TensorArrayWriteV3 Tile Transpose TruncatedNormal Unpack UnsortedSegmentSum VarHandleOp VarIsInitializedOp
VariableV2 Where While ZerosLike _Arg _MklConv2D _MklFusedBatchNormV3 _MklMatMul _Recv _Retval _Send
BlockLSTM BlockLSTMGrad CudnnRNN CudnnRNNBackprop TopKV2 InTopKV2 Unique ScatterNd TensorScatterUpdate
""".split()
ATEN_OPS = """
parameter buffer constant input target aten.mm.default aten.addmm.default aten.bmm.default aten.t.default
aten.view.default aten._unsafe_view.default aten.transpose.int aten.permute.default aten.expand.default
aten.add.Tensor aten.sub.Tensor aten.mul.Tensor aten.div.Tensor aten.mul.Scalar aten.relu.default
aten.threshold_backward.default aten.convolution.default aten.convolution_backward.default
aten.native_batch_norm.default aten.native_batch_norm_backward.default aten.native_layer_norm.default
aten.native_layer_norm_backward.default aten._softmax.default aten._softmax_backward_data.default
aten._log_softmax.default aten._log_softmax_backward_data.default aten.nll_loss_forward.default
aten.nll_loss_backward.default aten.embedding.default aten.embedding_dense_backward.default
aten.mean.dim aten.sum.dim_IntList aten.gelu.default aten.gelu_backward.default aten.detach.default
aten.clone.default aten.cat.default aten.slice.default aten.select.int aten.tanh.default aten.sigmoid.default
aten.masked_fill.Scalar aten.where.self aten.ones_like.default aten.zeros_like.default aten.add_.Tensor
""".split()
VOCABULARY: dict[str, int] = {name: i + 1 for i, name in enumerate(dict.fromkeys(TF_OPS + ATEN_OPS))}
UNKNOWN = 0
FEATURES_VERSION = 2  # bump when the feature set changes, so caches are rebuilt


def type_id(op_type: str) -> int:
    return VOCABULARY.get(op_type, UNKNOWN)


@dataclass(frozen=True)
class OpFeatures:
    type_ids: np.ndarray  # int64[N]
    numeric: np.ndarray  # float32[N, 3 + embedding_dim]: z(log time), z(log output bytes), z(depth), node2vec

    @property
    def vocabulary_size(self) -> int:
        return len(VOCABULARY) + 1

    def save(self, path: str | os.PathLike, graph: OpGraph) -> None:
        """Write to ``.npz`` with the digest of the graph they describe (atomic)."""
        buf = io.BytesIO()
        np.savez(buf, type_ids=self.type_ids, numeric=self.numeric, graph_digest=np.array(graph.digest()),
                 version=np.array(FEATURES_VERSION))
        atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike, graph: OpGraph) -> "OpFeatures":
        """Read features written by `save`, refusing ones made for another graph or feature version."""
        try:
            with np.load(path) as f:
                feats, digest, version = cls(f["type_ids"], f["numeric"]), str(f["graph_digest"]), int(f["version"])
        except FileNotFoundError:
            raise FormatError("file not found", source=str(path)) from None
        except Exception as exc:  # truncated, not an npz, missing arrays
            raise FormatError(f"not a features file ({type(exc).__name__}: {str(exc)[:120]})",
                              source=str(path)) from None
        if digest != graph.digest() or version != FEATURES_VERSION or len(feats.type_ids) != graph.n_ops:
            raise FormatError(f"made for another graph or feature version (graph {digest}, version {version}); "
                              "run the embed stage again", source=str(path), field="graph_digest")
        return feats


def zscore(x: np.ndarray) -> np.ndarray:
    centred = x - x.mean()
    std = centred.std()
    # A constant column has a rounding-level std: it carries no information.
    return centred / std if std > 1e-9 * max(1.0, float(np.abs(x).max(initial=0.0))) else np.zeros_like(x)


def structural_embedding(graph: OpGraph, dim: int, seed: int, *, walk_length: int = 20, num_walks: int = 5,
                         window: int = 5, backend: str = "node2vec") -> np.ndarray:
    """float32[N, dim] node2vec embedding of the undirected op graph (one worker: reproducible).

    The backend is this one function; PecanPy or another walker can replace it here.
    """
    if backend != "node2vec":
        raise ValueError(f"unknown embedding backend {backend!r}")
    import networkx as nx
    from node2vec import Node2Vec

    g = nx.Graph()
    g.add_nodes_from(range(graph.n_ops))
    g.add_edges_from(zip(graph.arrays.src.tolist(), graph.arrays.dst.tolist()))
    walker = Node2Vec(g, dimensions=dim, walk_length=walk_length, num_walks=num_walks, workers=1, seed=seed,
                      quiet=True)
    # gensim seeds vectors with Python's salted hash() by default: use a stable one.
    model = walker.fit(window=window, min_count=1, seed=seed, workers=1, hashfxn=_stable_hash)
    return np.stack([model.wv[str(i)] for i in range(graph.n_ops)]).astype(np.float32)


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def op_features(graph: OpGraph, *, embedding_dim: int = 16, seed: int = 0,
                cache_dir: str | os.PathLike | None = None, walk_length: int = 20, num_walks: int = 5,
                window: int = 5) -> OpFeatures:
    settings = [graph.digest(), _cost_digest(graph), embedding_dim, seed, FEATURES_VERSION]
    if (walk_length, num_walks, window) != (20, 5, 5):  # keeps the keys of caches made before these existed
        settings.append([walk_length, num_walks, window])
    key = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:20]
    path = Path(cache_dir) / f"features-{key}.npz" if cache_dir else None
    if path is not None and path.exists():
        with np.load(path) as f:
            return OpFeatures(f["type_ids"], f["numeric"])
    times = np.array([op.time_us for op in graph.ops])
    outputs = np.array([sum(op.output_bytes) for op in graph.ops], dtype=np.float64)
    rank = np.empty(graph.n_ops)
    rank[graph.topological_order()] = np.arange(graph.n_ops)
    numeric = np.column_stack([zscore(np.log1p(times)), zscore(np.log1p(outputs)), zscore(rank)]).astype(np.float32)
    if embedding_dim > 0:
        numeric = np.hstack([numeric, structural_embedding(graph, embedding_dim, seed, walk_length=walk_length,
                                                           num_walks=num_walks, window=window)])
    feats = OpFeatures(np.array([type_id(op.type) for op in graph.ops], np.int64), numeric)
    if path is not None:
        buf = io.BytesIO()
        np.savez(buf, type_ids=feats.type_ids, numeric=feats.numeric)
        atomic_write_bytes(path, buf.getvalue())
    return feats


def _cost_digest(graph: OpGraph) -> str:
    h = hashlib.sha256()
    h.update(np.array([op.time_us for op in graph.ops]).tobytes())
    return h.hexdigest()[:16]
