"""TensorFlow training graphs of the paper's five networks (TF1-compat graph mode, tf_keras).

Each builder returns one full training step in a fresh `tf.Graph`: in-graph
random inputs (so the step runs without feeds), forward, loss, gradients,
optimizer update and batch-norm moving-average updates, grouped into one
train op. Models are built as Keras functional models and then called on the
in-graph inputs with ``training=True``; the symbolic build leaves dead ops
(a Placeholder input, learning-phase conditionals) that `trinity.export.tf_graph`
prunes away.

Simplifications, all options of the builders:

* Image models see CIFAR-10-sized random images (32x32x3, 10 classes),
  resized in-graph to ``image_size``: 75 for InceptionV3 (the smallest
  tf_keras.applications accepts), 32 for NASNet-Large and PNASNet-5-Large
  (NASNet's minimum; the paper's 331 makes batch 32 infeasible on a 2-core
  CPU). Op counts do not depend on the image size.
* PNASNet-5-Large follows TF-slim's ``pnasnet.py`` (12 cells, 216 filters,
  stem multiplier 3, aux head, layer-scaled drop path); the aux head's 5x5
  pool shrinks to the feature map when the map is smaller than 5x5, and drop
  path omits slim's training-progress schedule (one step has no progress).
* NMT and GNMT unroll their LSTMs in Python (one cell call per time step), as
  static-RNN graphs do, so the graph is a DAG with every step's ops visible.
  No dropout. GNMT defaults to 4+4 layers of 512 units (paper: 8+8 of 1024)
  so a batch-64 step runs in seconds here; ``layers`` and ``hidden`` restore it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from trinity.errors import TrinityError

if TYPE_CHECKING:
    import tensorflow as tf

CIFAR_SIZE = 32
CIFAR_CLASSES = 10


@dataclass(frozen=True)
class TFTrainingGraph:
    """One training step: the graph and the names to run it by."""

    graph: "tf.Graph"
    train_op: str  # operation name: one run of it and the loss = one training step
    init_op: str  # operation name: initialises every variable
    loss: str  # tensor name, e.g. "loss:0"
    options: dict[str, Any] = field(default_factory=dict)  # every option, defaults filled in


# ---------------------------------------------------------------- shared parts
def _optimizer(name: str, learning_rate: float):
    import tensorflow as tf

    v1 = tf.compat.v1.train
    makers = {
        "sgd": lambda: v1.GradientDescentOptimizer(learning_rate),
        "momentum": lambda: v1.MomentumOptimizer(learning_rate, 0.9),
        "rmsprop": lambda: v1.RMSPropOptimizer(learning_rate, decay=0.9, momentum=0.9, epsilon=1.0),
        "adam": lambda: v1.AdamOptimizer(learning_rate),
    }
    if name not in makers:
        raise TrinityError(f"unknown optimizer {name!r}; known: {', '.join(makers)}", field="optimizer")
    return makers[name]()


def _finish(graph: "tf.Graph", loss: "tf.Tensor", variables: list, updates: list, options: dict) -> TFTrainingGraph:
    """Add gradients, the optimizer update and the init op; group updates into the train op."""
    import tensorflow as tf

    opt = _optimizer(options["optimizer"], options["learning_rate"])
    apply = opt.minimize(loss, var_list=variables)
    # Grouping (not control_dependencies around minimize) keeps one control edge
    # per update instead of one per gradient constant.
    train_op = tf.group(apply, *updates, name="train_op")
    init_op = tf.compat.v1.global_variables_initializer()
    return TFTrainingGraph(graph, train_op.name, init_op.name, loss.name, options)


def _check_batch(batch_size: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise TrinityError(f"must be a positive integer, got {batch_size!r}", field="batch_size")


def _merge(defaults: dict, options: dict) -> dict:
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TrinityError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(defaults))}",
                           field="options")
    return {**defaults, **options}


# -------------------------------------------------------------- image models
def _image_classifier(batch_size: int, options: dict, make_model: Callable) -> TFTrainingGraph:
    """Random CIFAR-10-like batch -> resize -> model -> softmax cross-entropy (+ weighted aux heads)."""
    import tensorflow as tf

    _check_batch(batch_size)
    size, classes = options["image_size"], options["num_classes"]
    graph = tf.Graph()
    with graph.as_default():
        images = tf.random.uniform([batch_size, CIFAR_SIZE, CIFAR_SIZE, 3], name="images")
        if size != CIFAR_SIZE:
            images = tf.image.resize(images, [size, size], name="upscale")
        labels = tf.random.uniform([batch_size], maxval=classes, dtype=tf.int32, name="labels")
        model = make_model(size, classes)
        outputs = model(images, training=True)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        # Slim's convention: main logits first, auxiliary heads weighted 0.4.
        losses = [tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=o))
                  for o in outputs]
        loss = tf.add_n([losses[0]] + [0.4 * a for a in losses[1:]], name="loss")
        return _finish(graph, loss, model.trainable_variables, model.get_updates_for(images), options)


def build_inception_v3(batch_size: int, **options) -> TFTrainingGraph:
    """InceptionV3 from tf_keras.applications (weights=None), images upscaled to 75x75."""
    import tf_keras as keras

    opts = _merge({"image_size": 75, "num_classes": CIFAR_CLASSES, "optimizer": "momentum",
                   "learning_rate": 0.1}, options)
    return _image_classifier(batch_size, opts, lambda size, classes: keras.applications.InceptionV3(
        weights=None, input_shape=(size, size, 3), classes=classes, classifier_activation=None))


def build_tiny_cnn(batch_size: int, **options) -> TFTrainingGraph:
    """A small CNN (two conv blocks with batch norm, a dense head): a training step of ~300 ops
    that exports, profiles and runs on workers in seconds, for tests and quick checks."""
    import tf_keras as keras

    opts = _merge({"image_size": CIFAR_SIZE, "num_classes": CIFAR_CLASSES, "filters": 16, "optimizer": "momentum",
                   "learning_rate": 0.01}, options)
    L = keras.layers

    def make(size, classes):
        f = opts["filters"]
        inputs = keras.Input((size, size, 3))
        x = inputs
        for i, width in enumerate((f, 2 * f)):
            x = L.Conv2D(width, 3, padding="same", use_bias=False, name=f"conv{i}")(x)
            x = L.BatchNormalization(name=f"bn{i}")(x)
            x = L.ReLU(name=f"relu{i}")(x)
            x = L.MaxPooling2D(2, name=f"pool{i}")(x)
        x = L.GlobalAveragePooling2D(name="gap")(x)
        return keras.Model(inputs, L.Dense(classes, name="logits")(x), name="tiny_cnn")

    return _image_classifier(batch_size, opts, make)


def build_nasnet_large(batch_size: int, **options) -> TFTrainingGraph:
    """NASNet-Large from tf_keras.applications (weights=None) on 32x32 images (its minimum)."""
    import tf_keras as keras

    opts = _merge({"image_size": CIFAR_SIZE, "num_classes": CIFAR_CLASSES, "optimizer": "momentum",
                   "learning_rate": 0.1}, options)
    return _image_classifier(batch_size, opts, lambda size, classes: keras.applications.NASNetLarge(
        weights=None, input_shape=(size, size, 3), classes=classes, classifier_activation=None))


# ------------------------------------------------------------ PNASNet-5-Large
# The PNASNet-5 cell (Liu et al. 2018, TF-slim pnasnet.py): five blocks, each
# the sum of two operations on hidden states (0 = this cell's input after a
# 1x1 conv, 1 = the previous cell's output, 2.. = earlier blocks); the cell
# output concatenates all five blocks.
PNASNET_OPERATIONS = ("separable_5x5_2", "max_pool_3x3", "separable_7x7_2", "max_pool_3x3",
                      "separable_5x5_2", "separable_3x3_2", "separable_3x3_2", "max_pool_3x3",
                      "separable_3x3_2", "none")
PNASNET_HIDDENSTATE_INDICES = (1, 1, 0, 0, 0, 0, 4, 0, 1, 0)


class _PNASNet:
    """Builds PNASNet-5 with tf_keras layers; names follow slim's scopes with '_' for '/'."""

    def __init__(self, num_cells: int, num_conv_filters: int, stem_multiplier: float,
                 drop_path_keep_prob: float, use_aux_head: bool, dense_dropout_keep_prob: float):
        import tensorflow as tf
        import tf_keras as keras

        self.tf, self.keras, self.L = tf, keras, keras.layers
        self.num_cells = num_cells
        self.num_conv_filters = num_conv_filters
        self.stem_multiplier = stem_multiplier
        self.drop_path_keep_prob = drop_path_keep_prob
        self.use_aux_head = use_aux_head
        self.dense_dropout_keep_prob = dense_dropout_keep_prob
        self.total_num_cells = num_cells + 2  # + the two stem cells

    # -- layer helpers (slim's arg scope: convs without bias, BN decay 0.9997, eps 1e-3)
    def conv(self, x, filters, kernel, name, stride=1, padding="same"):
        return self.L.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False, name=name)(x)

    def bn(self, x, name):
        return self.L.BatchNormalization(momentum=0.9997, epsilon=1e-3, name=name)(x)

    def relu(self, x):
        return self.L.ReLU()(x)

    def factorized_reduction(self, x, filters: int, stride: int, name: str):
        if stride == 1:
            return self.bn(self.conv(x, filters, 1, f"{name}_path_conv"), f"{name}_path_bn")
        path1 = self.L.AveragePooling2D(1, stride, padding="valid")(x)
        path1 = self.conv(path1, filters // 2, 1, f"{name}_path1_conv")
        # The second path sees the input shifted by one pixel.
        path2 = self.L.ZeroPadding2D(((0, 1), (0, 1)))(x)
        path2 = self.L.Cropping2D(((1, 0), (1, 0)))(path2)
        path2 = self.L.AveragePooling2D(1, stride, padding="valid")(path2)
        path2 = self.conv(path2, filters // 2 + filters % 2, 1, f"{name}_path2_conv")
        return self.bn(self.L.Concatenate()([path1, path2]), f"{name}_final_path_bn")

    def drop_path(self, x, cell_num: int):
        if self.drop_path_keep_prob >= 1.0:
            return x
        # slim's drop-connect v2: keep probability falls linearly with depth.
        ratio = (cell_num + 1) / self.total_num_cells
        return _drop_path_class()(1 - ratio * (1 - self.drop_path_keep_prob))(x)

    # -- the cell
    def cell(self, net, prev, filter_scaling: float, stride: int, cell_num: int, name: str):
        filters = int(self.num_conv_filters * filter_scaling)
        # The first stem cell has no previous cell: slim uses its raw input unchanged.
        prev = net if prev is None else self.reduce_prev_layer(prev, net, filters, name)
        h0 = self.bn(self.conv(self.relu(net), filters, 1, f"{name}_1x1"), f"{name}_beginning_bn")
        hidden = [h0, prev]
        for block in range(5):
            outs = []
            for side, k in (("left", 2 * block), ("right", 2 * block + 1)):
                idx = PNASNET_HIDDENSTATE_INDICES[k]
                outs.append(self.operation(hidden[idx], PNASNET_OPERATIONS[k], stride if idx < 2 else 1,
                                           filters, cell_num, f"{name}_comb_iter_{block}_{side}"))
            hidden.append(self.L.Add(name=f"{name}_comb_iter_{block}_combine")(outs))
        # No block output feeds another cell input except through this concat.
        return self.L.Concatenate(name=f"{name}_cell_output")(hidden[2:])

    def reduce_prev_layer(self, prev, curr, filters: int, name: str):
        if prev.shape[1] != curr.shape[1]:
            return self.factorized_reduction(self.relu(prev), filters, 2, f"{name}_prev")
        if prev.shape[-1] != filters:
            return self.bn(self.conv(self.relu(prev), filters, 1, f"{name}_prev_1x1"), f"{name}_prev_bn")
        return prev

    def operation(self, x, op: str, stride: int, filters: int, cell_num: int, name: str):
        if op.startswith("separable"):
            kernel = int(op.split("_")[1][0])
            for layer in (1, 2):
                x = self.relu(x)
                x = self.L.SeparableConv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                                           name=f"{name}_separable_{kernel}x{kernel}_{layer}")(x)
                x = self.bn(x, f"{name}_bn_sep_{kernel}x{kernel}_{layer}")
                stride = 1
        elif op == "max_pool_3x3":
            x = self.L.MaxPooling2D(3, stride, padding="same")(x)
            if x.shape[-1] != filters:
                x = self.bn(self.conv(x, filters, 1, f"{name}_1x1"), f"{name}_bn_1")
        elif op == "none":
            if stride > 1 or x.shape[-1] != filters:
                x = self.bn(self.conv(self.relu(x), filters, 1, f"{name}_1x1", stride=stride), f"{name}_bn_1")
            return x
        return self.drop_path(x, cell_num)

    def aux_head(self, x, classes: int, name: str):
        x = self.relu(x)
        pool = min(5, int(x.shape[1]))
        x = self.L.AveragePooling2D(pool, 3, padding="valid")(x)
        x = self.relu(self.bn(self.conv(x, 128, 1, f"{name}_proj"), f"{name}_aux_bn0"))
        x = self.conv(x, 768, tuple(x.shape[1:3]), f"{name}_conv", padding="valid")
        x = self.relu(self.bn(x, f"{name}_aux_bn1"))
        return self.L.Dense(classes, name=f"{name}_logits")(self.L.Flatten()(x))

    def __call__(self, size: int, classes: int):
        keras = self.keras
        inputs = keras.Input((size, size, 3))
        net = self.bn(self.conv(inputs, int(32 * self.stem_multiplier), 3, "conv0", stride=2, padding="valid"),
                      "conv0_bn")
        outputs = [None, net]
        scaling = 0.25  # 1 / filter_scaling_rate ** num_stem_cells
        for i in range(2):
            net = self.cell(net, outputs[-2], scaling, 2, i, f"cell_stem_{i}")
            outputs.append(net)
            scaling *= 2
        reductions = {self.num_cells // 3, 2 * self.num_cells // 3}
        aux_cell = 2 * self.num_cells // 3 - 1
        scaling, aux = 1.0, []
        for i in range(self.num_cells):
            stride = 2 if i in reductions else 1
            if stride == 2:
                scaling *= 2
            net = self.cell(net, outputs[-2], scaling, stride, i + 2, f"cell_{i}")
            outputs.append(net)
            if self.use_aux_head and i == aux_cell:
                aux.append(self.aux_head(net, classes, "aux"))
        net = self.L.GlobalAveragePooling2D()(self.relu(net))
        net = self.L.Dropout(1 - self.dense_dropout_keep_prob)(net)
        logits = self.L.Dense(classes, name="final_layer_logits")(net)
        return keras.Model(inputs, [logits] + aux, name="pnasnet_large")


@functools.cache
def _drop_path_class():
    """The DropPath Keras layer, defined on first use so TF loads only when a model is built."""
    import tensorflow as tf
    import tf_keras as keras

    class DropPath(keras.layers.Layer):
        """Zero a whole example's branch with probability 1 - keep_prob (slim's drop_path)."""

        def __init__(self, keep_prob: float, **kwargs):
            super().__init__(**kwargs)
            self.keep_prob = keep_prob

        def call(self, x, training=None):
            if training is not True:  # the symbolic build (pruned later) and inference
                return x
            noise = tf.random.uniform([tf.shape(x)[0], 1, 1, 1], dtype=x.dtype)
            return x * (1.0 / self.keep_prob) * tf.floor(self.keep_prob + noise)

    return DropPath


def build_pnasnet_large(batch_size: int, **options) -> TFTrainingGraph:
    """PNASNet-5-Large (slim's large ImageNet config) with its aux head, on 32x32 images."""
    opts = _merge({"image_size": CIFAR_SIZE, "num_classes": CIFAR_CLASSES, "optimizer": "momentum",
                   "learning_rate": 0.1, "num_cells": 12, "num_conv_filters": 216, "stem_multiplier": 3.0,
                   "drop_path_keep_prob": 0.6, "use_aux_head": True, "dense_dropout_keep_prob": 0.5}, options)
    net = _PNASNet(opts["num_cells"], opts["num_conv_filters"], opts["stem_multiplier"],
                   opts["drop_path_keep_prob"], opts["use_aux_head"], opts["dense_dropout_keep_prob"])
    return _image_classifier(batch_size, opts, net)


# ---------------------------------------------------------- sequence models
def _unrolled(cell, inputs: list, name: str) -> list:
    """Run a tf_keras LSTMCell over a list of per-step inputs (a static RNN)."""
    import tensorflow as tf

    batch = inputs[0].shape[0]
    state = [tf.zeros([batch, cell.units], name=f"{name}_h0"), tf.zeros([batch, cell.units], name=f"{name}_c0")]
    outputs = []
    for x in inputs:
        h, state = cell(x, state, training=True)
        outputs.append(h)
    return outputs


def _seq2seq_inputs(batch_size: int, opts: dict):
    """Random source, target-input and target-output token ids, and the two embedding tables."""
    import tensorflow as tf
    import tf_keras as keras

    shape, vocab = [batch_size, opts["seq_len"]], opts["vocab_size"]
    src = tf.random.uniform(shape, maxval=vocab, dtype=tf.int32, name="source_ids")
    tgt_in = tf.random.uniform(shape, maxval=vocab, dtype=tf.int32, name="target_input_ids")
    tgt_out = tf.random.uniform(shape, maxval=vocab, dtype=tf.int32, name="target_output_ids")
    emb_src = keras.layers.Embedding(vocab, opts["hidden"], name="embedding_encoder")
    emb_tgt = keras.layers.Embedding(vocab, opts["hidden"], name="embedding_decoder")
    return tf.unstack(emb_src(src), axis=1), tf.unstack(emb_tgt(tgt_in), axis=1), tgt_out


def _softmax_loss(outputs: list, targets: "tf.Tensor", vocab: int) -> "tf.Tensor":
    """Project every decoder step to the vocabulary at once, mean cross-entropy over tokens."""
    import tensorflow as tf
    import tf_keras as keras

    stacked = tf.stack(outputs, axis=1)  # [batch, time, hidden]
    logits = keras.layers.Dense(vocab, name="output_projection")(stacked)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_mean(xent, name="loss")


_SEQ_DEFAULTS = {"vocab_size": 10000, "seq_len": 40, "hidden": 512, "layers": 2, "optimizer": "adam",
                 "learning_rate": 1e-3}


def build_nmt(batch_size: int, **options) -> TFTrainingGraph:
    """NMT (Luong et al. 2015 / the TF NMT tutorial): stacked-LSTM encoder and decoder,
    "general" Luong attention on the top decoder layer, attention vector fed back
    into the next step's input (input feeding). Vocabulary 10k (PTB-sized)."""
    import tensorflow as tf
    import tf_keras as keras

    _check_batch(batch_size)
    opts = _merge(_SEQ_DEFAULTS, options)
    hidden, n_layers = opts["hidden"], opts["layers"]
    graph = tf.Graph()
    with graph.as_default():
        src, tgt, tgt_out = _seq2seq_inputs(batch_size, opts)
        enc = src
        for i in range(n_layers):
            enc = _unrolled(keras.layers.LSTMCell(hidden, name=f"encoder_lstm_{i}"), enc, f"encoder_{i}")
        memory = tf.stack(enc, axis=1, name="memory")  # [batch, src_time, hidden]
        keys = keras.layers.Dense(hidden, use_bias=False, name="attention_memory")(memory)
        attend = keras.layers.Dense(hidden, use_bias=False, activation="tanh", name="attention_layer")
        cells = [keras.layers.LSTMCell(hidden, name=f"decoder_lstm_{i}") for i in range(n_layers)]
        states = [[tf.zeros([batch_size, hidden]), tf.zeros([batch_size, hidden])] for _ in cells]
        attention = tf.zeros([batch_size, hidden], name="attention_0")
        outputs = []
        for x in tgt:
            h = tf.concat([x, attention], axis=1)
            for i, cell in enumerate(cells):
                h, states[i] = cell(h, states[i], training=True)
            scores = tf.squeeze(tf.matmul(keys, h[:, :, None]), axis=2)  # score(h, s) = h^T W s
            context = tf.squeeze(tf.matmul(tf.nn.softmax(scores)[:, None, :], memory), axis=1)
            attention = attend(tf.concat([context, h], axis=1))
            outputs.append(attention)
        loss = _softmax_loss(outputs, tgt_out, opts["vocab_size"])
        return _finish(graph, loss, tf.compat.v1.trainable_variables(), [], opts)


def build_gnmt(batch_size: int, **options) -> TFTrainingGraph:
    """GNMT (Wu et al. 2016): bidirectional first encoder layer, residual connections
    from the third layer up in encoder and decoder, additive attention queried by
    the bottom decoder layer's previous output, its context fed to every decoder layer."""
    import tensorflow as tf
    import tf_keras as keras

    _check_batch(batch_size)
    opts = _merge({**_SEQ_DEFAULTS, "layers": 4, "seq_len": 20}, options)
    hidden, n_layers = opts["hidden"], opts["layers"]
    if n_layers < 2:
        raise TrinityError(f"GNMT needs at least 2 layers, got {n_layers}", field="layers")
    graph = tf.Graph()
    with graph.as_default():
        src, tgt, tgt_out = _seq2seq_inputs(batch_size, opts)
        fw = _unrolled(keras.layers.LSTMCell(hidden, name="encoder_bi_fw"), src, "encoder_bi_fw")
        bw = _unrolled(keras.layers.LSTMCell(hidden, name="encoder_bi_bw"), src[::-1], "encoder_bi_bw")[::-1]
        enc = [tf.concat([f, b], axis=1) for f, b in zip(fw, bw)]
        for i in range(1, n_layers):  # layer i+1 of the paper; residuals from layer 3 on
            out = _unrolled(keras.layers.LSTMCell(hidden, name=f"encoder_lstm_{i}"), enc, f"encoder_{i}")
            enc = [o + x for o, x in zip(out, enc)] if i >= 2 else out
        memory = tf.stack(enc, axis=1, name="memory")
        keys = keras.layers.Dense(hidden, use_bias=False, name="attention_keys")(memory)
        query_layer = keras.layers.Dense(hidden, use_bias=False, name="attention_query")
        v = keras.layers.Dense(1, use_bias=False, name="attention_v")
        cells = [keras.layers.LSTMCell(hidden, name=f"decoder_lstm_{i}") for i in range(n_layers)]
        states = [[tf.zeros([batch_size, hidden]), tf.zeros([batch_size, hidden])] for _ in cells]
        outputs = []
        for x in tgt:
            # Attention from the bottom layer's previous output (its current h state).
            scores = tf.squeeze(v(tf.tanh(keys + query_layer(states[0][0])[:, None, :])), axis=2)
            context = tf.squeeze(tf.matmul(tf.nn.softmax(scores)[:, None, :], memory), axis=1)
            h = x
            for i, cell in enumerate(cells):
                out, states[i] = cell(tf.concat([h, context], axis=1), states[i], training=True)
                h = out + h if i >= 2 else out
            outputs.append(h)
        loss = _softmax_loss(outputs, tgt_out, opts["vocab_size"])
        return _finish(graph, loss, tf.compat.v1.trainable_variables(), [], opts)
