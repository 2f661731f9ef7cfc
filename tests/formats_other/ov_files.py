"""OpenVINO IR files written by openvino itself: ov.save_model of a tiny torch model (float32 and
compress_to_fp16), NNCF's weight compression, and decompression patterns built with openvino's
opset (i8 and i4 symmetric, u8 with a scalar zero point)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tiny_torch():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 16, bias=False)).eval()


def saved(folder: Path) -> dict[str, Path]:
    import openvino as ov
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    m = tiny_torch()
    out = {}
    for name, fp16 in (("fp32", False), ("fp16", True)):
        out[name] = folder / f"{name}.xml"
        ov.save_model(ov.convert_model(m, example_input=torch.zeros(1, 64)), out[name], compress_to_fp16=fp16)
    return out


def nncf_int4(folder: Path) -> Path:
    """NNCF INT4_ASYM, group 16: u4 codes [32, 4, 16] with u4 zero points and f16 scales, and its
    u8 asymmetric per-channel backup for the last layer."""
    import nncf
    import openvino as ov
    import torch

    model = ov.convert_model(tiny_torch(), example_input=torch.zeros(1, 64))
    done = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=16, ratio=1.0)
    path = folder / "int4_asym.xml"
    ov.save_model(done, path, compress_to_fp16=False)
    return path


def hand_patterns(folder: Path) -> Path:
    """Three compressed weights: i8 per-row with an f32 scale converted to f16, i4 grouped (f32
    multiply), u8 with a scalar zero point."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 16], np.float32, name="x")

    def chain(name, etype, codes, scale, zero=None, compute=ov.Type.f16):
        c = ov.op.Constant(etype, ov.Shape(list(codes.shape)), codes.ravel().tolist())
        c.set_friendly_name(name)
        w = ops.convert(c, compute)
        if zero is not None:
            z = ops.convert(ov.op.Constant(etype, ov.Shape(list(zero.shape)), zero.ravel().tolist()), compute)
            w = ops.subtract(w, z)
        s = ops.constant(scale.astype(np.float32)) if compute == ov.Type.f32 else \
            ops.convert(ops.constant(scale.astype(np.float32)), compute)
        w = ops.multiply(w, s)
        w = ops.reshape(w, ops.constant(np.array([-1, 16], np.int64)), False)
        return ops.convert(w, ov.Type.f32)

    a = chain("w_i8", ov.Type.i8, rng.integers(-127, 128, (8, 16)), rng.uniform(0.001, 0.01, (8, 1)))
    b = chain("w_i4", ov.Type.i4, rng.integers(-8, 8, (8, 2, 8)), rng.uniform(0.01, 0.1, (8, 2, 1)),
              compute=ov.Type.f32)
    c = chain("w_u8", ov.Type.u8, rng.integers(0, 256, (8, 16)), rng.uniform(0.001, 0.01, (8, 1)),
              np.array(128))
    y = ops.concat([ops.matmul(x, w, False, True) for w in (a, b, c)], 1)
    path = folder / "hand.xml"
    ov.save_model(ov.Model([y], [x], "hand"), path, compress_to_fp16=False)
    return path


def decompressed_by_openvino(xml: Path, const_name: str) -> np.ndarray:
    """What openvino's CPU plugin computes for the decompression chain of Const `const_name`:
    the Multiply's output, inferred as a model of its own."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml))
    node = next(op for op in model.get_ops() if op.get_friendly_name() == const_name)
    while node.get_type_name() != "Multiply":
        node = next(iter(node.output(0).get_target_inputs())).get_node()
    sub = ov.Model([node.output(0)], [], "decompression")
    return core.compile_model(sub, "CPU").create_infer_request().infer()[0]


def const_data(xml: Path) -> dict[str, np.ndarray]:
    """Every plain (not sub-byte) Const's values, as openvino reads them."""
    import openvino as ov

    out = {}
    for op in ov.Core().read_model(str(xml)).get_ops():
        if op.get_type_name() == "Constant" and op.get_element_type().bitwidth >= 8:
            out[op.get_friendly_name()] = np.array(op.get_data())
    return out
