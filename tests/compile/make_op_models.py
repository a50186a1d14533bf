#!/usr/bin/env python3
"""Writes one small ONNX model per imported op form, with numpy reference outputs.

Usage: make_op_models.py OUTDIR. Each case NAME is OUTDIR/NAME/model.onnx with test_data_set_0/
input_K.pb and output_K.pb (the ONNX backend test layout), the expected values computed here with
numpy from the op's definition, independently of the importer.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from publish_dir import published  # noqa: E402

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(31)
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
             np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const", value=numpy_helper.from_array(np.asarray(array), name))


def case(out, name, nodes, inputs, outputs, opset=17, refused=False):
    """Saves the graph of `nodes` with inputs/outputs given as {name: array} (in order); a case the
    importer must refuse gets a file named `refused` beside its model. Opsets past 17 are newer than
    Debian's onnx checker knows, so those models are not checked."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype], v.shape) for k, v in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if opset <= 17:
        onnx.checker.check_model(model)
    data = os.path.join(out, name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    # Every file is written beside its place and renamed into it: tests run in parallel regenerate
    # the same (seeded) files while others read them.
    write(os.path.join(out, name, "model.onnx"), model.SerializeToString())
    if refused:
        write(os.path.join(out, name, "refused"), b"")
    for i, v in enumerate(inputs.values()):
        write(os.path.join(data, f"input_{i}.pb"), numpy_helper.from_array(v).SerializeToString())
    for i, v in enumerate(outputs.values()):
        write(os.path.join(data, f"output_{i}.pb"), numpy_helper.from_array(v).SerializeToString())


def write(path, data):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


def f32(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def unary_ops(out):
    """Every elementwise activation and math op on one input, one output each."""
    x = f32(2, 3, 4)
    x[0, 0, :] = [-1.0, 0.0, 1.0, 0.5]  # ties and zeros
    cases = {
        "Neg": (dict(), -x), "Abs": (dict(), np.abs(x)), "Floor": (dict(), np.floor(x)), "Ceil": (dict(), np.ceil(x)),
        "Sin": (dict(), np.sin(x)), "Cos": (dict(), np.cos(x)), "Softplus": (dict(), np.log1p(np.exp(x))),
        "LeakyRelu": (dict(alpha=0.1), np.where(x >= 0, x, 0.1 * x)),
        "Elu": (dict(alpha=0.5), np.where(x > 0, x, 0.5 * (np.exp(x) - 1))),
        "HardSigmoid": (dict(alpha=0.25, beta=0.4), np.clip(0.25 * x + 0.4, 0, 1)),
        "HardSwish": (dict(), x * np.clip(x / 6 + 0.5, 0, 1)),
    }
    nodes, outputs = [], {}
    for op, (attrs, y) in cases.items():
        nodes.append(helper.make_node(op, ["x"], ["y_" + op], name=op.lower(), **attrs))
        outputs["y_" + op] = y.astype(np.float32)
    positive = np.abs(x) + 0.5
    nodes += [helper.make_node("Abs", ["x"], ["ax"], name="abs_for_log"), const("half", np.float32(0.5)),
              helper.make_node("Add", ["ax", "half"], ["px"], name="positive"),
              helper.make_node("Log", ["px"], ["y_Log"], name="log"),
              helper.make_node("Reciprocal", ["px"], ["y_Reciprocal"], name="reciprocal")]
    outputs["y_Log"] = np.log(positive).astype(np.float32)
    outputs["y_Reciprocal"] = (1 / positive).astype(np.float32)
    case(out, "unary", nodes, {"x": x}, outputs)


def binary_ops(out):
    """Min, Max (two and three inputs), Sum, Mod (fmod 1 on floats), comparisons, And, Or, Not."""
    a, b, c = f32(2, 3, 4), f32(3, 4), f32(1, 4)
    b[0, 0] = a[0, 0, 0]  # one equal pair for the comparisons
    nodes = [helper.make_node("Min", ["a", "b"], ["min2"], name="min2"),
             helper.make_node("Max", ["a", "b", "c"], ["max3"], name="max3"),
             helper.make_node("Sum", ["a", "b", "c"], ["sum3"], name="sum3"),
             helper.make_node("Mod", ["a", "b"], ["fmod"], name="fmod", fmod=1),
             helper.make_node("Less", ["a", "b"], ["less"], name="less"),
             helper.make_node("GreaterOrEqual", ["a", "b"], ["ge"], name="ge"),
             helper.make_node("Greater", ["a", "c"], ["gt"], name="gt"),
             helper.make_node("LessOrEqual", ["a", "c"], ["le"], name="le"),
             helper.make_node("And", ["less", "gt"], ["both"], name="and"),
             helper.make_node("Or", ["less", "gt"], ["either"], name="or"),
             helper.make_node("Not", ["less"], ["not_less"], name="not")]
    outputs = {"min2": np.minimum(a, b), "max3": np.maximum(np.maximum(a, b), c), "sum3": a + b + c,
               "fmod": np.fmod(a, b), "less": a < b, "ge": a >= b, "gt": a > c, "le": a <= c,
               "both": (a < b) & (a > c), "either": (a < b) | (a > c), "not_less": ~(a < b)}
    case(out, "binary", nodes, {"a": a, "b": b, "c": c}, outputs)
    p = np.array([[7, -7, 7, -7, 0, 5]], dtype=np.int32)
    q = np.array([[3, 3, -3, -3, 4, -2]], dtype=np.int32)
    case(out, "mod_int", [helper.make_node("Mod", ["p", "q"], ["r"], name="mod")], {"p": p, "q": q},
         {"r": np.mod(p, q).astype(np.int32)})


def clip(out):
    """Clip with constant bounds (ReLU6 as MobileNet exports it), one bound, and the attribute form of opset 6."""
    x = f32(2, 8, low=-8, high=8)
    case(out, "clip_relu6", [const("lo", np.float32(0)), const("hi", np.float32(6)),
                             helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="relu6")],
         {"x": x}, {"y": np.clip(x, 0, 6)})
    case(out, "clip_max_only", [const("hi", np.float32(1.5)), helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")],
         {"x": x}, {"y": np.minimum(x, 1.5)})
    case(out, "clip_opset6", [helper.make_node("Clip", ["x"], ["y"], name="clip", min=-1.0, max=2.0)],
         {"x": x}, {"y": np.clip(x, -1, 2)}, opset=6)


def pad(out):
    x = f32(1, 2, 3, 4)
    pads = np.array([0, 0, 1, 2, 0, 0, 2, 1], dtype=np.int64)
    np_pads = ((0, 0), (0, 0), (1, 2), (2, 1))
    for mode in ("constant", "reflect", "edge"):
        nodes = [const("pads", pads)]
        inputs = ["x", "pads"]
        kwargs = dict(constant_values=1.5) if mode == "constant" else {}
        if mode == "constant":
            nodes.append(const("value", np.float32(1.5)))
            inputs.append("value")
        nodes.append(helper.make_node("Pad", inputs, ["y"], name="pad", mode=mode))
        y = np.pad(x, np_pads, mode="symmetric" if False else mode, **kwargs)
        case(out, "pad_" + mode, nodes, {"x": x}, {"y": y.astype(np.float32)})
    crop = np.array([0, 0, -1, 1, 0, 0, 0, -2], dtype=np.int64)
    case(out, "pad_negative", [const("pads", crop), helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")],
         {"x": x}, {"y": np.pad(x[:, :, 1:, :2], ((0, 0), (0, 0), (0, 0), (1, 0)))})
    case(out, "pad_opset9", [helper.make_node("Pad", ["x"], ["y"], name="pad", pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.0)],
         {"x": x}, {"y": np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))}, opset=9)


def shapes(out):
    """Tile, Trilu, CumSum, Expand, Range and ConstantOfShape (the last two fold)."""
    x = f32(2, 3)
    case(out, "tile", [const("reps", np.array([2, 3], dtype=np.int64)),
                       helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")], {"x": x}, {"y": np.tile(x, (2, 3))})
    m = f32(2, 4, 5)
    case(out, "trilu", [const("k", np.array(1, dtype=np.int64)),
                        helper.make_node("Trilu", ["m", "k"], ["upper"], name="triu"),
                        helper.make_node("Trilu", ["m"], ["lower"], name="tril", upper=0)],
         {"m": m}, {"upper": np.triu(m, 1), "lower": np.tril(m)})
    c = f32(2, 5, 3)
    axis1 = np.cumsum(c, axis=1)
    rev_excl = np.flip(np.cumsum(np.flip(c, 2), 2), 2) - c
    case(out, "cumsum", [const("axis1", np.array(1, dtype=np.int64)), const("axis2", np.array(-1, dtype=np.int64)),
                         helper.make_node("CumSum", ["c", "axis1"], ["y1"], name="cumsum"),
                         helper.make_node("CumSum", ["c", "axis2"], ["y2"], name="cumsum_rev", exclusive=1, reverse=1)],
         {"c": c}, {"y1": axis1.astype(np.float32), "y2": rev_excl.astype(np.float32)})
    v = f32(3, 1)
    case(out, "expand_range", [const("shape", np.array([2, 3, 4], dtype=np.int64)),
                               helper.make_node("Expand", ["v", "shape"], ["e"], name="expand"),
                               const("start", np.float32(1)), const("limit", np.float32(5)),
                               const("delta", np.float32(1)),
                               helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
                               helper.make_node("Add", ["e", "r"], ["y"], name="add")],
         {"v": v}, {"y": (np.broadcast_to(v, (2, 3, 4)) + np.arange(1, 5, dtype=np.float32)).astype(np.float32)})


def scatter_nd(out):
    """ScatterND with constant indices: without a reduction on computed data and updates (a repeated row: the
    last update wins), with add and mul (repeated rows combine), and on constant inputs (folded)."""
    def reference(data, indices, updates, combine=None):
        y = data.copy()
        for u in np.ndindex(indices.shape[:-1]):
            at = tuple(indices[u])
            y[at] = updates[u] if combine is None else combine(y[at], updates[u])
        return y
    data, rows = f32(4, 3, 2), np.array([[1], [3], [1]], dtype=np.int64)
    updates, cells = f32(3, 3, 2), np.array([[[0, 2], [3, 1]], [[2, 0], [0, 2]]], dtype=np.int64)
    cell_updates = f32(2, 2, 2)
    zeros = np.zeros((3, 2), dtype=np.float32)
    folded_indices, folded_updates = np.array([[0, 1], [2, 0]], dtype=np.int64), np.array([5, 7], dtype=np.float32)
    nodes = [const("rows", rows), const("cells", cells), const("zeros", zeros), const("fi", folded_indices),
             const("fu", folded_updates),
             helper.make_node("ScatterND", ["data", "rows", "updates"], ["replaced"], name="scatter"),
             helper.make_node("ScatterND", ["data", "rows", "updates"], ["added"], name="scatter_add", reduction="add"),
             helper.make_node("ScatterND", ["data", "cells", "cell_updates"], ["multiplied"], name="scatter_mul",
                              reduction="mul"),
             helper.make_node("ScatterND", ["zeros", "fi", "fu"], ["mask"], name="scatter_folded"),
             helper.make_node("Add", ["data", "mask"], ["masked"], name="add_mask")]
    mask = reference(zeros, folded_indices, folded_updates)
    case(out, "scatternd", nodes, {"data": data, "updates": updates, "cell_updates": cell_updates},
         {"replaced": reference(data, rows, updates), "added": reference(data, rows, updates, np.add),
          "multiplied": reference(data, cells, cell_updates, np.multiply), "masked": data + mask})
    # Swin-T's form: an FP32 mask folded from ScatterND, added to scores over a broadcast axis between kept ones
    # (on the chip an SXM element map of another element width than the FP16 output's).
    scores, window_mask = f32(2, 3, 4, 5), np.zeros((2, 1, 4, 5), dtype=np.float32)
    mask_at, mask_rows = np.array([[0, 0, 1], [1, 0, 3]], dtype=np.int64), np.full((2, 5), -100, dtype=np.float32)
    case(out, "scatternd_mask", [const("window_mask", window_mask), const("mask_at", mask_at), const("mask_rows", mask_rows),
                                 helper.make_node("ScatterND", ["window_mask", "mask_at", "mask_rows"], ["mask"], name="mask"),
                                 helper.make_node("Add", ["scores", "mask"], ["y"], name="add_mask")],
         {"scores": scores}, {"y": scores + reference(window_mask, mask_at, mask_rows)})
    # Dropout in training form with ratio 0 (torchvision's Swin: F.dropout(p=0.0)) keeps every element.
    x = f32(2, 5)
    case(out, "dropout_zero_ratio", [const("ratio", np.float32(0)), const("training", np.array(True)),
                                     helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "kept"], name="dropout"),
                                     helper.make_node("Neg", ["x"], ["negated"], name="neg"),
                                     helper.make_node("Where", ["kept", "y", "negated"], ["z"], name="where")],
         {"x": x}, {"z": x})
    # Refused: indices computed at run time (a graph input).
    case(out, "scatternd_input_indices", [helper.make_node("ScatterND", ["data", "at", "updates"], ["y"], name="at_run_time")],
         {"data": data, "at": rows, "updates": updates}, {"y": reference(data, rows, updates)}, refused=True)


def einsum(out):
    a, b = f32(2, 3, 4), f32(2, 4, 5)
    q, k = f32(1, 2, 3, 4), f32(1, 2, 5, 4)
    case(out, "einsum", [helper.make_node("Einsum", ["a", "b"], ["bmm"], name="bmm", equation="bij,bjk->bik"),
                         helper.make_node("Einsum", ["q", "k"], ["scores"], name="scores", equation="bhid,bhjd->bhij"),
                         helper.make_node("Einsum", ["a"], ["t"], name="transpose", equation="bij->jbi"),
                         helper.make_node("Einsum", ["a"], ["s"], name="sum", equation="bij->bj"),
                         helper.make_node("Einsum", ["q", "k"], ["outer"], name="outer", equation="...id,...jd->...ji")],
         {"a": a, "b": b, "q": q, "k": k},
         {"bmm": np.einsum("bij,bjk->bik", a, b), "scores": np.einsum("bhid,bhjd->bhij", q, k),
          "t": np.einsum("bij->jbi", a), "s": np.einsum("bij->bj", a), "outer": np.einsum("...id,...jd->...ji", q, k)})


def norms(out):
    x = f32(2, 3, 4, 5)
    scale, bias = f32(3), f32(3)
    mean = x.mean(axis=(2, 3), keepdims=True)
    var = x.var(axis=(2, 3), keepdims=True)
    y = (x - mean) / np.sqrt(var + 1e-3) * scale.reshape(1, 3, 1, 1) + bias.reshape(1, 3, 1, 1)
    case(out, "instancenorm", [const("scale", scale), const("bias", bias),
                               helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm",
                                                epsilon=1e-3)],
         {"x": x}, {"y": y.astype(np.float32)})

    # GroupNormalization: 6 channels in 2 groups; scale and bias per group at opset 18, per channel at 21.
    x = f32(2, 6, 3, 4)
    groups = x.reshape(2, 2, -1)
    normed = ((groups - groups.mean(axis=2, keepdims=True)) /
              np.sqrt(groups.var(axis=2, keepdims=True) + 1e-4))
    for opset, k in ((18, 2), (21, 6)):
        scale, bias = f32(k), f32(k)
        if k == 2:
            y = (normed * scale.reshape(1, 2, 1) + bias.reshape(1, 2, 1)).reshape(x.shape)
        else:
            y = normed.reshape(x.shape) * scale.reshape(1, 6, 1, 1) + bias.reshape(1, 6, 1, 1)
        case(out, f"groupnorm{opset}", [const("scale", scale), const("bias", bias),
                                        helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                                                         name="norm", epsilon=1e-4, num_groups=2)],
             {"x": x}, {"y": y.astype(np.float32)}, opset=opset)
    # Opset 18's forms of ops known before: ReduceMean's axes an input, Split's num_outputs.
    x = f32(2, 5, 4)
    case(out, "opset18_forms", [const("axes", np.array([1], dtype=np.int64)),
                                helper.make_node("ReduceMean", ["x", "axes"], ["mean"], name="mean", keepdims=0),
                                helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2)],
         {"x": x}, {"mean": x.mean(axis=1), "a": x[:, :3], "b": x[:, 3:]}, opset=18)


def resize(out):
    x = f32(1, 2, 3, 4)
    # Nearest x2, as torch's nn.Upsample(scale_factor=2) exports it (asymmetric, floor).
    near = x.repeat(2, axis=2).repeat(2, axis=3)
    case(out, "resize_nearest", [const("scales", np.array([1, 1, 2, 2], dtype=np.float32)),
                                 helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="nearest",
                                                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
         {"x": x}, {"y": near})

    def linear_axis(v, axis, size):
        n = v.shape[axis]
        src = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0, n - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (src - lo).reshape([-1 if d == axis else 1 for d in range(v.ndim)])
        return np.take(v, lo, axis=axis) * (1 - w) + np.take(v, hi, axis=axis) * w

    # Refused: a scale that is no size factor, an empty axis resized to a non-empty one, a result past 2^48 bytes.
    case(out, "resize_nan_scale", [const("scales", np.array([1, 1, np.nan, 2], dtype=np.float32)),
                                   helper.make_node("Resize", ["x", "", "scales"], ["y"], name="nan_scale")],
         {"x": x}, {"y": x}, refused=True)
    empty = np.zeros((1, 2, 0, 4), dtype=np.float32)
    case(out, "resize_empty_axis", [const("sizes", np.array([1, 2, 5, 4], dtype=np.int64)),
                                    helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="empty_axis")],
         {"x": empty}, {"y": empty}, refused=True)
    case(out, "resize_too_large", [const("sizes", np.array([1, 2, 2**40, 2**10], dtype=np.int64)),
                                   helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="too_large")],
         {"x": x}, {"y": x}, refused=True)

    lin = linear_axis(linear_axis(x, 2, 5), 3, 7)
    case(out, "resize_linear", [const("sizes", np.array([1, 2, 5, 7], dtype=np.int64)),
                                helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="bilinear", mode="linear")],
         {"x": x}, {"y": lin.astype(np.float32)})

    def cubic_axis(v, axis, size, align_corners=False, a=-0.75, exclude_outside=False):
        """ONNX's cubic mode on one axis: Keys' kernel over 4 taps, edge-clamped indices."""
        n = v.shape[axis]
        parts = []
        for i in range(size):
            s = i * (n - 1) / (size - 1) if align_corners else (i + 0.5) * n / size - 0.5
            f = np.floor(s)
            taps = [f - 1 + t for t in range(4)]
            w = np.array([cubic_kernel(s - j, a) for j in taps])
            if exclude_outside:
                w = np.where([0 <= j < n for j in taps], w, 0.0)
                w = w / w.sum()
            parts.append(sum(w[t] * np.take(v, int(np.clip(taps[t], 0, n - 1)), axis=axis) for t in range(4)))
        return np.stack(parts, axis=axis)

    def cubic_kernel(d, a):
        d = abs(d)
        if d <= 1:
            return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
        if d < 2:
            return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
        return 0.0

    up = cubic_axis(cubic_axis(x.astype(np.float64), 2, 6), 3, 8)
    down = cubic_axis(cubic_axis(x.astype(np.float64), 2, 2, True, -0.5, True), 3, 3, True, -0.5, True)
    case(out, "resize_cubic", [const("scales", np.array([1, 1, 2, 2], dtype=np.float32)),
                               const("sizes", np.array([1, 2, 2, 3], dtype=np.int64)),
                               helper.make_node("Resize", ["x", "", "scales"], ["up"], name="bicubic", mode="cubic"),
                               helper.make_node("Resize", ["x", "", "", "sizes"], ["down"], name="bicubic_down",
                                                mode="cubic", coordinate_transformation_mode="align_corners",
                                                cubic_coeff_a=-0.5, exclude_outside=1)],
         {"x": x}, {"up": up.astype(np.float32), "down": down.astype(np.float32)})


def reductions(out):
    """ReduceMin, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, LogSoftmax, Mean, GlobalMaxPool."""
    x = f32(2, 3, 4, low=0.5, high=3.0)
    x[0, 1, :] *= -1
    nodes = [helper.make_node("ReduceMin", ["x"], ["rmin"], name="rmin", axes=[1], keepdims=1),
             helper.make_node("ReduceSumSquare", ["x"], ["rss"], name="rss", axes=[2], keepdims=0),
             helper.make_node("ReduceL1", ["x"], ["rl1"], name="rl1", axes=[0, 2], keepdims=1),
             helper.make_node("ReduceL2", ["x"], ["rl2"], name="rl2", axes=[2], keepdims=0),
             helper.make_node("Abs", ["x"], ["ax"], name="abs"),
             helper.make_node("ReduceLogSum", ["ax"], ["rls"], name="rls", axes=[1], keepdims=1),
             helper.make_node("LogSoftmax", ["x"], ["lsm"], name="lsm", axis=1),
             helper.make_node("Mean", ["x", "ax"], ["mean"], name="mean"),
             helper.make_node("Unsqueeze", ["x", "one"], ["x4"], name="to4d"),
             helper.make_node("GlobalMaxPool", ["x4"], ["gmp"], name="gmp"),
             const("one", np.array([1], dtype=np.int64))]
    shifted = x - x.max(axis=1, keepdims=True)
    outputs = {"rmin": x.min(axis=1, keepdims=True), "rss": (x * x).sum(axis=2), "rl1": np.abs(x).sum(axis=(0, 2), keepdims=True),
               "rl2": np.sqrt((x * x).sum(axis=2)), "rls": np.log(np.abs(x).sum(axis=1, keepdims=True)),
               "lsm": shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)), "mean": (x + np.abs(x)) / 2,
               "gmp": x[:, None].max(axis=(2, 3), keepdims=True)}
    nodes.insert(0, nodes.pop())  # the Constant first
    case(out, "reductions", nodes, {"x": x}, {k: v.astype(np.float32) for k, v in outputs.items()})


def unsupported(out):
    """Three unsupported kinds, one of them twice: one error lists them all."""
    nodes = [helper.make_node("Hardmax", ["x"], ["a"], name="first_hardmax"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Hardmax", ["b"], ["c"], name="second_hardmax"),
             helper.make_node("Det", ["c"], ["d"], name="det"),
             helper.make_node("Round", ["c"], ["y"], name="round")]
    x = f32(3, 3)
    case(out, "unsupported_many", nodes, {"x": x}, {"y": x}, refused=True)


def main():
    with published(sys.argv[1]) as out:
        unary_ops(out)
        binary_ops(out)
        clip(out)
        pad(out)
        shapes(out)
        scatter_nd(out)
        einsum(out)
        norms(out)
        resize(out)
        reductions(out)
        unsupported(out)


if __name__ == "__main__":
    main()
