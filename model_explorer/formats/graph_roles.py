"""What a stored tensor of a graph format is for, read from the operators that take it.

A graph (ONNX, TFLite) stores more than weights: attention masks (a constant that feeds
`Where`, an additive mask before `Softmax`, a table of −inf rows that `Gather` picks from),
shape and index constants, scalars, and initializers no node takes. The deep checks
(checks/deep.py) read `TensorInfo.extra["role"]`, set here, so that a −inf mask is no NaN/Inf
error and a zero-valued axis constant no all-zero warning. Roles:

- "weight": what an operator computes with (the default for a float tensor a node takes);
- "bias": a Conv/Gemm/FullyConnected bias, or an RNN's B (converters write zero biases);
- "table": the data input of Gather (an embedding, or a table of mask rows);
- "mask": an input of Where, or of an Add/Sub/Mul whose output reaches Softmax within a few
  elementwise or reshaping steps;
- "index": an integer tensor no weight input takes (shapes, axes, starts and ends, indices);
- "scalar": one element;
- "unused": no operator of the graph takes it.

Ops are named as ONNX names them; the TFLite reader maps its builtin codes to those names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ROLES = ("weight", "bias", "table", "mask", "index", "scalar", "unused")
# (op, input index) that take a bias
BIAS_INPUTS = {("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2), ("QLinearConv", 8), ("LSTM", 3),
               ("GRU", 3), ("RNN", 3), ("DynamicQuantizeLSTM", 3), ("FullyConnected", 2),
               ("TransposeConv", 3), ("DepthwiseConv", 2), ("Attention", 2), ("QAttention", 2),
               # a norm's shift: zero where the source had none (LayerNorm without affine)
               ("BatchNormalization", 2), ("LayerNormalization", 2),
               ("InstanceNormalization", 2), ("GroupNormalization", 2)}
# Ops that hand a stored tensor on unchanged but for its type: the role is the output's.
CONVERTS = {"Dequantize", "DequantizeLinear", "Cast", "Identity"}
# Ops whose integer inputs at these positions are weights (quantized codes, int32 biases).
INT_WEIGHT_INPUTS = {("MatMulInteger", 1), ("MatMulInteger", 3), ("ConvInteger", 1),
                     ("ConvInteger", 3), ("QLinearConv", 3), ("QLinearConv", 5),
                     ("QLinearConv", 8), ("QLinearMatMul", 0), ("QLinearMatMul", 2),
                     ("QLinearMatMul", 3), ("QLinearMatMul", 5), ("DynamicQuantizeMatMul", 1),
                     ("DynamicQuantizeMatMul", 3), ("DynamicQuantizeLSTM", 1),
                     ("DynamicQuantizeLSTM", 2), ("DynamicQuantizeLSTM", 6),
                     ("DynamicQuantizeLSTM", 9), ("QAttention", 1), ("QAttention", 7),
                     ("DequantizeLinear", 0), ("DequantizeLinear", 2), ("MatMulNBits", 1),
                     ("MatMulNBits", 3), ("Conv", 1), ("MatMul", 1), ("Gemm", 1),
                     ("FullyConnected", 1), ("DepthwiseConv", 1), ("TransposeConv", 1),
                     ("FullyConnected", 2), ("Conv", 2), ("DepthwiseConv", 2), ("Gather", 0)}
MASK_OPS = {"Where"}
MASKED = {"Add", "Sub", "Mul"}  # the additive (or multiplicative) mask of a score
SOFTMAX = {"Softmax", "LogSoftmax"}
# Ops a score passes through between the mask and the Softmax
PASS_THROUGH = {"Add", "Sub", "Mul", "Div", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Cast",
                "Transpose", "Slice", "Where", "Identity", "Tile", "Concat"}
HOPS = 4


def assign_roles(tensors: Mapping, nodes: Iterable[tuple[str, list[str], list[str]]]) -> None:
    """Set `extra["role"]` of each tensor in `tensors` from the (op, inputs, outputs) of the
    graph's nodes (a tensor listed under another name than the graph's has it in
    `extra["graph_name"]`)."""
    nodes = list(nodes)
    consumers: dict[str, list[tuple[int, int]]] = {}  # value name -> (node index, input index)
    for n, (_, inputs, _) in enumerate(nodes):
        for i, name in enumerate(inputs):
            if name:
                consumers.setdefault(name, []).append((n, i))
    reaches: dict[int, bool] = {}

    def to_softmax(n: int, hops: int) -> bool:
        if n in reaches:
            return reaches[n]
        reaches[n] = False  # a cycle (there are none in a valid graph) ends the search
        found = False
        if hops > 0:
            for out in nodes[n][2]:
                for m, _ in consumers.get(out, ()):
                    op = nodes[m][0]
                    if op in SOFTMAX or (op in PASS_THROUGH and to_softmax(m, hops - 1)):
                        found = True
                        break
                if found:
                    break
        reaches[n] = found
        return found

    def uses_of(name: str, depth: int = 3) -> list[tuple[str, int, int]]:
        """(op, input index, node) of each use, seen through a Dequantize or Cast."""
        found = []
        for n, i in consumers.get(name, ()):
            op, _, outs = nodes[n]
            if op in CONVERTS and i == 0 and depth and outs and outs[0]:
                found += uses_of(outs[0], depth - 1) or [(op, i, n)]
            else:
                found.append((op, i, n))
        return found

    for name, info in tensors.items():
        info.extra["role"] = _role(info, uses_of(info.extra.get("graph_name", name)), to_softmax)


def _role(info, uses: list[tuple[str, int, int]], to_softmax) -> str:
    if not uses:
        return "unused"
    if any(op in MASK_OPS for op, _, _ in uses) or \
            any(op in MASKED and to_softmax(n, HOPS) for op, _, n in uses):
        return "mask"
    integer = info.quant is None and info.dtype[:1] in ("I", "U", "B")  # I64, U8, BOOL...
    if integer and not any((op, i) in INT_WEIGHT_INPUTS for op, i, _ in uses):
        return "index"
    if info.numel <= 1:
        return "scalar"
    if any(op == "Gather" and i == 0 for op, i, _ in uses):
        return "table"
    if all((op, i) in BIAS_INPUTS for op, i, _ in uses):
        return "bias"
    return "weight"
