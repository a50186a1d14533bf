#!/usr/bin/env python3
"""Writes the small ONNX models the importer tests read, with numpy reference outputs.

Usage: make_onnx_models.py OUTDIR. Nothing is downloaded; every model is built here with the
onnx helper API, so the tests regenerate them on each run.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from publish_dir import published  # noqa: E402

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, path, **kwargs):
    onnx.checker.check_model(model)
    onnx.save(model, path, **kwargs)


def write_tensor(array, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def mlp_with_external_weights(out):
    """MatMul + bias + Relu, MatMul; the weights live in an external file next to the model."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((16, 32)).astype(np.float32)
    b0 = rng.standard_normal((32,)).astype(np.float32)
    w1 = rng.standard_normal((32, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h0"], name="/layers.0/fc"),
        helper.make_node("Add", ["h0", "b0"], ["h1"], name="/layers.0/bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="/layers.0/relu"),
        helper.make_node("MatMul", ["h2", "w1"], ["y"], name="/layers.1/fc"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(w0, "w0"), numpy_helper.from_array(b0, "b0"), numpy_helper.from_array(w1, "w1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    save(model, os.path.join(out, "mlp_external.onnx"), save_as_external_data=True,
         all_tensors_to_one_file=True, location="mlp_external.weights", size_threshold=0)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    y = np.maximum(x @ w0 + b0, 0) @ w1
    write_tensor(x, os.path.join(out, "mlp_external_input.pb"))
    write_tensor(y.astype(np.float32), os.path.join(out, "mlp_external_output.pb"))
    # The same pair in the ONNX backend test layout, for tsp-sim --inputs/--expect.
    os.makedirs(os.path.join(out, "mlp_external_data"), exist_ok=True)
    write_tensor(x, os.path.join(out, "mlp_external_data", "input_0.pb"))
    write_tensor(y.astype(np.float32), os.path.join(out, "mlp_external_data", "output_0.pb"))
    # The model without its weights file: shapes only.
    os.makedirs(os.path.join(out, "weights_missing"), exist_ok=True)
    shutil.copyfile(os.path.join(out, "mlp_external.onnx"), os.path.join(out, "weights_missing", "mlp_external.onnx"))


def shape_subgraph(out):
    """PyTorch-style dynamic reshape without constant folding: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, dtype=np.int64), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather_batch", axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"], name="unsqueeze"),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Range", ["r0", "r_limit", "r1"], ["idx"], name="range"),
        helper.make_node("Cast", ["idx"], ["idx_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["flat", "idx_f"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "shape_subgraph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])],
        [i64("zero", 0), i64("axes0", [0]), i64("minus1", [-1]), i64("r0", 0), i64("r_limit", 12), i64("r1", 1)])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(out, "shape_subgraph.onnx"))


def single_op(out, name, op_type, opset=13, **attrs):
    """One node on a [2,3] input: for the unsupported-op and opset errors."""
    node = helper.make_node(op_type, ["x"], ["y"], name=name, **attrs)
    graph = helper.make_graph([node], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, os.path.join(out, name + ".onnx"))


def softmax_opset11(out):
    """Softmax before opset 13: the input coerced to a matrix at `axis` (here 1 of [2, 3, 4]) and
    normalised over each row of 12, not over the axis alone."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=1)
    graph = helper.make_graph([node], "softmax11", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]),
              os.path.join(out, "softmax_opset11.onnx"))
    rows = x.reshape(2, 12)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    write_tensor(x, os.path.join(out, "softmax_opset11_input.pb"))
    write_tensor((e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4).astype(np.float32),
                 os.path.join(out, "softmax_opset11_output.pb"))


def pool_3d(out):
    """A max-pool over three spatial dimensions, which the lowering does not take (2-D windows only)."""
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool_3d", kernel_shape=[2, 2, 2])
    graph = helper.make_graph([node], "pool_3d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 3, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)]), os.path.join(out, "pool_3d.onnx"))


def conv_1d(out):
    """A 1-D convolution (stride 2, pads 1) and a 1-D max-pool, with an input and the numpy result in
    the backend test layout (conv_1d_data/), for the importer's 2-D form and a functional run."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 16)).astype(np.float32)
    w = (0.5 * rng.standard_normal((6, 4, 3))).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv_1d", strides=[2], pads=[1, 1])
    pool = helper.make_node("MaxPool", ["c"], ["y"], name="pool_1d", kernel_shape=[2])
    graph = helper.make_graph([conv, pool], "conv_1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 7])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "conv_1d.onnx"))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    c = np.stack([np.einsum("ck,mck->m", padded[0, :, 2 * i:2 * i + 3], w) + b for i in range(8)], axis=1)[None]
    y = np.maximum(c[:, :, :-1], c[:, :, 1:])
    os.makedirs(os.path.join(out, "conv_1d_data"), exist_ok=True)
    write_tensor(x, os.path.join(out, "conv_1d_data", "input_0.pb"))
    write_tensor(y.astype(np.float32), os.path.join(out, "conv_1d_data", "output_0.pb"))


def average_pool_excluding_padding(out):
    """AveragePool 3x3, pads 1, count_include_pad 0, ceil_mode 1, stride 2 on [1, 2, 6, 6]: every
    border output divides by the taps inside the input only; numpy's result beside it."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    node = helper.make_node("AveragePool", ["x"], ["y"], name="avg_exclude", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            strides=[2, 2], ceil_mode=1, count_include_pad=0)
    graph = helper.make_graph([node], "avg_exclude", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "avg_exclude.onnx"))
    y = np.zeros((1, 2, 4, 4), np.float32)
    for i in range(4):
        for j in range(4):
            rows = [r for r in range(2 * i - 1, 2 * i + 2) if 0 <= r < 6]
            cols = [c for c in range(2 * j - 1, 2 * j + 2) if 0 <= c < 6]
            y[0, :, i, j] = x[0][:, rows][:, :, cols].mean(axis=(1, 2))
    write_tensor(x, os.path.join(out, "avg_exclude_input.pb"))
    write_tensor(y, os.path.join(out, "avg_exclude_output.pb"))


def unnamed_dynamic(out):
    """An input whose dimension has neither a value nor a name."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "dyn", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "unnamed_dim.onnx"))


def bad_initializer_shape(out, name, dims):
    """An Add whose constant operand's shape cannot be a tensor's (no checker: it would refuse it)."""
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend(dims)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], name, [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, name + ".onnx"))


def gpt_like(out, blocks, width):
    """A chain of named transformer-ish blocks for the layer rule: /h.N/... names."""
    rng = np.random.default_rng(2)
    nodes, inits = [], []
    prev = "x"
    for i in range(blocks):
        w = f"h.{i}.w"
        inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), w))
        nodes.append(helper.make_node("MatMul", [prev, w], [f"/h.{i}/mm"], name=f"/h.{i}/MatMul"))
        nodes.append(helper.make_node("Tanh", [f"/h.{i}/mm"], [f"/h.{i}/out"], name=f"/h.{i}/Tanh"))
        prev = f"/h.{i}/out"
    nodes.append(helper.make_node("Softmax", [prev], ["y"], name="head_softmax", axis=-1))
    graph = helper.make_graph(nodes, "gpt_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "gpt_like.onnx"))


def reduce_max_head(out):
    """A weight matmul then ReduceMax: a model autodiff has no gradient rule for (training error)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.1 * i for i in range(12)])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("ReduceMax", ["h"], ["y"], name="head_max", axes=[1], keepdims=1)]
    graph = helper.make_graph(nodes, "reduce_max_head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])], [w])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "reduce_max_head.onnx"))


def resnet_block(out):
    """A ResNet as torchvision exports it at opset 13, shrunk: stem Conv/BN/Relu/MaxPool, one
    bottleneck block with its shortcut Add, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(3)
    nodes, inits = [], []

    def param(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    def conv_bn(prefix, x, cin, cout, k, stride, relu):
        w = param(f"{prefix}.weight", (cout, cin, k, k))
        nodes.append(helper.make_node("Conv", [x, w], [f"{prefix}/conv"], name=f"{prefix}/Conv", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        bn = [param(f"{prefix}.bn.{n}", (cout,)) for n in ("weight", "bias", "running_mean")]
        inits.append(numpy_helper.from_array(np.ones(cout, dtype=np.float32), f"{prefix}.bn.running_var"))
        nodes.append(helper.make_node("BatchNormalization", [f"{prefix}/conv"] + bn + [f"{prefix}.bn.running_var"],
                                      [f"{prefix}/bn"], name=f"{prefix}/BatchNormalization", epsilon=1e-5))
        if not relu:
            return f"{prefix}/bn"
        nodes.append(helper.make_node("Relu", [f"{prefix}/bn"], [f"{prefix}/relu"], name=f"{prefix}/Relu"))
        return f"{prefix}/relu"

    x = conv_bn("/conv1", "images", 3, 16, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["/maxpool"], name="/maxpool/MaxPool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    y = conv_bn("/layer1/layer1.0/conv1", "/maxpool", 16, 8, 1, 1, True)
    y = conv_bn("/layer1/layer1.0/conv2", y, 8, 8, 3, 1, True)
    y = conv_bn("/layer1/layer1.0/conv3", y, 8, 16, 1, 1, False)
    nodes.append(helper.make_node("Add", [y, "/maxpool"], ["/layer1/layer1.0/add"], name="/layer1/layer1.0/Add"))
    nodes.append(helper.make_node("Relu", ["/layer1/layer1.0/add"], ["/layer1/layer1.0/out"], name="/layer1/layer1.0/Relu"))
    nodes.append(helper.make_node("GlobalAveragePool", ["/layer1/layer1.0/out"], ["/pool"], name="/avgpool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["/pool"], ["/flat"], name="/Flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["/flat", param("fc.weight", (10, 16)), param("fc.bias", (10,))], ["logits"],
                                  name="/fc/Gemm", transB=1))
    graph = helper.make_graph(nodes, "resnet_block",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "resnet_block.onnx"))


def main():
    with published(sys.argv[1]) as out:
        mlp_with_external_weights(out)
        shape_subgraph(out)
        single_op(out, "unsupported_op", "Hardmax")
        single_op(out, "old_opset", "Relu", opset=9)
        single_op(out, "new_opset", "Relu", opset=22)
        single_op(out, "old_mul_one_input", "Mul", opset=6)  # fewer inputs than its schema: refused before the upgrade
        unnamed_dynamic(out)
        bad_initializer_shape(out, "negative_dim", [-1, 2])
        bad_initializer_shape(out, "huge_dims", [2**32, 2**32])
        softmax_opset11(out)
        pool_3d(out)
        conv_1d(out)
        average_pool_excluding_padding(out)
        gpt_like(out, 3, 8)
        reduce_max_head(out)
        resnet_block(out)
        with open(os.path.join(out, "corrupt.onnx"), "wb") as f:
            f.write(b"\x08\x07this is not a protobuf model\xff\xff\xff")


if __name__ == "__main__":
    main()
