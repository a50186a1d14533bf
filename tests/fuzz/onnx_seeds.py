#!/usr/bin/env python3
"""Writes the ONNX fuzzer's seed corpus into OUT: every ONNX backend node test's model.onnx (when
libonnx-testdata is installed) and a few small models made here, one file per model.

usage: onnx_seeds.py OUT
"""
import glob
import os
import shutil
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for model in sorted(glob.glob("/usr/share/libonnx-testdata/data/node/*/model.onnx")):
    shutil.copy(model, os.path.join(out, os.path.basename(os.path.dirname(model)) + ".onnx"))

from onnx import TensorProto, helper, numpy_helper  # noqa: E402  (only this part needs onnx)
import numpy as np  # noqa: E402

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
shape = numpy_helper.from_array(np.array([-1, 8], np.int64), "shape")
nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="layers.0/fc"),
         helper.make_node("Relu", ["h"], ["r"], name="layers.0/act"),
         helper.make_node("Reshape", ["r", "shape"], ["y"], name="layers.1/reshape")]
model = helper.make_model(helper.make_graph(nodes, "mlp", [x], [y], [w, shape]),
                          opset_imports=[helper.make_opsetid("", 13)])
with open(os.path.join(out, "mlp_symbolic.onnx"), "wb") as f:
    f.write(model.SerializeToString())
print(len(os.listdir(out)), "seeds in", out)
