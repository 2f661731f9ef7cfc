"""A TFLite subgraph's operators: which tensors each takes and makes, by tensor index, with the
builtin operator named as ONNX names it where formats/graph_roles.py needs it.

    Operator: opcode_index(0) inputs(1) outputs(2) ...   (inputs -1: an optional input left out)
"""

from __future__ import annotations

from ..structure import OpRecord
from .flatbuf import Table, Vector

MAX_OPERATORS = 200_000  # read per subgraph
# builtin code (schema.fbs BuiltinOperator) -> the name graph_roles uses
BUILTIN_NAMES = {
    0: "Add", 1: "AveragePool", 14: "Sigmoid", 17: "MaxPool", 19: "Relu", 21: "Relu6",
    23: "ResizeBilinear", 28: "Tanh", 34: "Pad", 40: "ReduceMean", 45: "StridedSlice", 47: "Exp",
    49: "Split", 54: "PRelu", 55: "Max", 57: "Min", 60: "Pad", 2: "Concat", 3: "Conv", 4: "DepthwiseConv", 6: "Dequantize", 9: "FullyConnected",
    16: "LSTM", 18: "Mul", 22: "Reshape", 24: "RNN", 25: "Softmax", 36: "Gather", 39: "Transpose",
    41: "Sub", 42: "Div", 43: "Squeeze", 50: "LogSoftmax", 53: "Cast", 64: "Where", 65: "Slice",
    67: "TransposeConv", 69: "Tile", 70: "Unsqueeze", 123: "Where", 126: "MatMul",
}


def op_name(code) -> str:
    """The name of an operator code (a builtin number or a custom string)."""
    if isinstance(code, str):
        return code
    return BUILTIN_NAMES.get(code, f"builtin {code}")


def operators(ops: Vector | None, codes: list, names: dict[int, str], graph: str = "") -> list[OpRecord]:
    """The operators of one subgraph, each with every input and output named by `names` (the
    listed and the activation tensors; "" when left out or unknown) and its bytes."""
    out: list[OpRecord] = []
    if ops is None:
        return out
    for k in range(min(ops.length, MAX_OPERATORS)):
        t: Table = ops.table(k, f"operator {k}")
        index = t.scalar(0, "I", what="opcode index")
        code = codes[index] if index < len(codes) else None
        ins, outs = t.vector(1, 4, "operator inputs"), t.vector(2, 4, "operator outputs")
        out.append(OpRecord(op_name(code) if code is not None else f"opcode {index}", "",
                            [names.get(i, "") for i in (ins.numbers("i") if ins else ())],
                            [names.get(i, "") for i in (outs.numbers("i") if outs else ())],
                            name=f"operator {k}", at=t.pos, length=t.inline_size, graph=graph))
    return out
