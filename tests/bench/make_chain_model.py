#!/usr/bin/env python3
"""Writes a large ONNX model for the import benchmark: BLOCKS blocks of 10 nodes named
/layers.N/..., with a Shape->Gather->Unsqueeze->Concat->Reshape subgraph in each (as PyTorch
exports without constant folding) and weights stored as external data that is not written:
the importer reads shapes only, as in a study of a model whose weights are not on hand.

Usage: make_chain_model.py BLOCKS PATH
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def external(name, dims):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "absent.weights"), ("offset", "0"), ("length", str(4 * int(np.prod(dims))))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def main():
    blocks, path = int(sys.argv[1]), sys.argv[2]
    width = 64
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, dtype=np.int64), name)
    inits = [i64("zero", 0), i64("axes0", [0]), i64("minus1", [-1])]
    nodes = []
    x = "x"
    for b in range(blocks):
        p = f"/layers.{b}"
        inits += [external(f"{p}/w", [width, width]), external(f"{p}/b", [width])]
        nodes += [
            helper.make_node("MatMul", [x, f"{p}/w"], [f"{p}/mm"], name=f"{p}/MatMul"),
            helper.make_node("Add", [f"{p}/mm", f"{p}/b"], [f"{p}/bias"], name=f"{p}/Add"),
            helper.make_node("Relu", [f"{p}/bias"], [f"{p}/relu"], name=f"{p}/Relu"),
            helper.make_node("Shape", [f"{p}/relu"], [f"{p}/shape"], name=f"{p}/Shape"),
            helper.make_node("Gather", [f"{p}/shape", "zero"], [f"{p}/batch"], name=f"{p}/Gather", axis=0),
            helper.make_node("Unsqueeze", [f"{p}/batch", "axes0"], [f"{p}/batch1"], name=f"{p}/Unsqueeze"),
            helper.make_node("Concat", [f"{p}/batch1", "minus1"], [f"{p}/target"], name=f"{p}/Concat", axis=0),
            helper.make_node("Reshape", [f"{p}/relu", f"{p}/target"], [f"{p}/flat"], name=f"{p}/Reshape"),
            helper.make_node("Tanh", [f"{p}/flat"], [f"{p}/tanh"], name=f"{p}/Tanh"),
            helper.make_node("Add", [f"{p}/tanh", x], [f"{p}/out"], name=f"{p}/Residual"),
        ]
        x = f"{p}/out"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
