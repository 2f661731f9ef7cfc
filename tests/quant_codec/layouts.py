"""Tiny checkpoint folders in the exact on-disk layouts of the Hub quantization libraries,
written from a known float weight, with the value each library dequantizes them to.

GPTQ, AWQ, fine-grained FP8 and gpt-oss MXFP4 need a GPU (or unavailable packages) to write,
so they are packed here by hand following the libraries' published packing code (AutoGPTQ
QuantLinear.pack, AutoAWQ WQLinear_GEMM/GEMV.from_linear, DeepSeek-V3 block quantization,
transformers' mxfp4 unpacking run backwards); bitsandbytes and compressed-tensors are written
with the real libraries on the CPU (`*_real` builders, importorskip in the tests).

`group(ckpt)` folds each layer's components into the logical tensor exactly as
QUANT_INTERFACE.md describes (the format side does this at open once it lands).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

from model_explorer.records import Quant, TensorInfo

F32 = np.float32
DTYPE_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
               np.dtype(np.int64): "I64", np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8",
               np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
               np.dtype(ml_dtypes.float8_e8m0fnu): "F8_E8M0", np.dtype(np.int16): "I16"}
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], F32)


def weight(out: int, inp: int, seed: int = 0, scale: float = 0.05) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal((out, inp))).astype(F32)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.tobytes()
        header[name] = {"dtype": DTYPE_NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_folder(folder: Path, tensors: dict, quant: dict | None, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors)
    cfg = dict(config or {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    if quant is not None:
        cfg["quantization_config"] = quant
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


# -- bit packing (little-endian streams of `bits`-bit codes in 32-bit words) -----------------

def pack_stream(codes: np.ndarray, bits: int, axis: int = 0) -> np.ndarray:
    """Codes along `axis` -> int32 words along that axis: code k at bits k*bits.. of the
    stream (AutoGPTQ's pack for 2/4/8 bits, and its word-spanning 3-bit steps)."""
    c = np.moveaxis(np.asarray(codes, np.uint64), axis, 0)
    n = c.shape[0]
    nw = -(-n * bits // 32)
    words = np.zeros((nw + 1,) + c.shape[1:], np.uint64)
    for k in range(n):
        pos = k * bits
        w, s = pos // 32, pos % 32
        words[w] |= (c[k] << np.uint64(s)) & np.uint64(0xFFFFFFFF)
        if s + bits > 32:
            words[w + 1] |= c[k] >> np.uint64(32 - s)
    return np.moveaxis(words[:nw].astype(np.uint32).view(np.int32), 0, axis)


def autogptq_pack_3bit(intweight: np.ndarray) -> np.ndarray:
    """AutoGPTQ QuantLinear.pack for bits == 3, step for step (the reference the stream
    packer is checked against)."""
    intweight = intweight.astype(np.uint32)
    qweight = np.zeros((intweight.shape[0] // 32 * 3, intweight.shape[1]), np.uint32)
    i = row = 0
    while row < qweight.shape[0]:
        for j in range(i, i + 10):
            qweight[row] |= intweight[j] << (3 * (j - i))
        i += 10
        qweight[row] |= intweight[i] << 30
        row += 1
        qweight[row] |= (intweight[i] >> 2) & 1
        i += 1
        for j in range(i, i + 10):
            qweight[row] |= intweight[j] << (3 * (j - i) + 1)
        i += 10
        qweight[row] |= intweight[i] << 31
        row += 1
        qweight[row] |= (intweight[i] >> 1) & 0x3
        i += 1
        for j in range(i, i + 10):
            qweight[row] |= intweight[j] << (3 * (j - i) + 2)
        i += 10
        row += 1
    return qweight.view(np.int32)


# -- GPTQ -------------------------------------------------------------------------------------

def gptq_quantize(w: np.ndarray, bits: int, group: int, sym: bool, desc_act: bool, seed: int = 1):
    """GPTQ's min-max Quantizer per (group, output channel) with act-order groups: codes
    [out, in], scales fp16 [groups, out], zeros [groups, out], g_idx [in]."""
    out_f, in_f = w.shape
    maxq = 2 ** bits - 1
    order = np.random.default_rng(seed).permutation(in_f) if desc_act else np.arange(in_f)
    g_idx = np.empty(in_f, np.int32)
    g_idx[order] = np.arange(in_f) // group
    groups = -(-in_f // group)
    scales = np.zeros((groups, out_f), np.float16)
    zeros = np.zeros((groups, out_f), np.int64)
    for g in range(groups):
        x = w[:, g_idx == g]
        lo, hi = np.minimum(x.min(1), 0), np.maximum(x.max(1), 0)
        if sym:
            hi = np.maximum(-lo, hi)
            lo = -hi
        s = ((hi - lo) / maxq).astype(np.float16)
        scales[g] = s
        zeros[g] = (maxq + 1) // 2 if sym else np.clip(np.round(-lo / s.astype(F32)), 1, maxq)
    s_full = scales[g_idx].T.astype(F32)  # [out, in]
    z_full = zeros[g_idx].T
    q = np.clip(np.round(w / s_full) + z_full, 0, maxq).astype(np.int64)
    expected = (s_full * (q - z_full).astype(F32)).astype(F32)
    return q, scales, zeros, g_idx, expected


def gptq_layer(base: str, w: np.ndarray, bits=4, group=32, sym=False, desc_act=False,
               fmt="gptq") -> tuple[dict, np.ndarray]:
    q, scales, zeros, g_idx, expected = gptq_quantize(w, bits, group, sym, desc_act)
    stored_z = (zeros - 1) & (2 ** bits - 1) if fmt == "gptq" else zeros
    t = {base + ".qweight": pack_stream(q.T, bits, axis=0),           # [in*bits/32, out]
         base + ".qzeros": pack_stream(stored_z, bits, axis=1),       # [groups, out*bits/32]
         base + ".scales": scales, base + ".g_idx": g_idx}
    return t, expected


def gptq_config(bits=4, group=32, sym=False, desc_act=False, fmt="gptq") -> dict:
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "sym": sym,
            "desc_act": desc_act, "checkpoint_format": fmt}


# -- AWQ --------------------------------------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_quantize(w: np.ndarray, group: int):
    """AutoAWQ pseudo_quantize_tensor (zero point): per group of inputs and output channel."""
    out_f, in_f = w.shape
    x = w.reshape(out_f, in_f // group, group)
    hi, lo = x.max(2), x.min(2)
    s = (np.maximum(hi - lo, 1e-5) / 15).astype(np.float16)
    z = np.clip(-np.round(lo / s.astype(F32)), 0, 15).astype(np.int64)
    q = np.clip(np.round(x / s.astype(F32)[:, :, None]) + z[:, :, None], 0, 15).astype(np.int64)
    expected = ((q - z[:, :, None]).astype(F32) * s.astype(F32)[:, :, None]).reshape(out_f, in_f)
    return q.reshape(out_f, in_f), s.T.copy(), z.T.copy(), expected  # scales/zeros [groups, out]


def awq_gemm_pack(intweight: np.ndarray) -> np.ndarray:
    """WQLinear_GEMM.from_linear: intweight [rows, cols] -> [rows, cols/8] words, nibble i of
    word c holding column 8c + AWQ_ORDER[i]."""
    rows, cols = intweight.shape
    q = np.zeros((rows, cols // 8), np.uint32)
    for c in range(cols // 8):
        for i in range(8):
            q[:, c] |= intweight[:, c * 8 + AWQ_ORDER[i]].astype(np.uint32) << (4 * i)
    return q.view(np.int32)


def awq_layer(base: str, w: np.ndarray, group=32, version="gemm") -> tuple[dict, np.ndarray]:
    q, s, z, expected = awq_quantize(w, group)
    if version == "gemm":
        t = {base + ".qweight": awq_gemm_pack(q.T), base + ".qzeros": awq_gemm_pack(z),
             base + ".scales": s}
        return t, expected
    # GEMV: qweight [out, in/8] plain order; zeros/scales padded to calculate_zeros_width
    out_f, in_f = w.shape
    groups = in_f // group
    mult = 1 if group >= 128 else {64: 2, 32: 4}[group]
    words = -(-groups // 8)
    zw = -(-words // mult) * mult
    qz = np.zeros((out_f, zw * 8), np.int64)
    qz[:, :groups] = z.T
    sc = np.zeros((out_f, zw * 8), np.float16)
    sc[:, :groups] = s.T
    t = {base + ".qweight": pack_stream(q, 4, axis=1), base + ".qzeros": pack_stream(qz, 4, axis=1),
         base + ".scales": sc}
    return t, expected


def awq_config(group=32, version="gemm") -> dict:
    return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
            "version": version}


# -- fine-grained FP8 -------------------------------------------------------------------------

def fp8_block_layer(base: str, w: np.ndarray, block=(128, 128)) -> tuple[dict, np.ndarray]:
    """DeepSeek-V3 weight quantization: per block s = amax / 448, fp8 = w / s; scale_inv = s."""
    out_f, in_f = w.shape
    br, bc = block
    sr, sc = -(-out_f // br), -(-in_f // bc)
    s = np.zeros((sr, sc), F32)
    for i in range(sr):
        for j in range(sc):
            s[i, j] = max(float(np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max()), 1e-4) / 448
    s_full = np.repeat(np.repeat(s, br, 0), bc, 1)[:out_f, :in_f]
    q = (w / s_full).astype(ml_dtypes.float8_e4m3fn)
    expected = q.astype(F32) * s_full
    return {base + ".weight": q, base + ".weight_scale_inv": s}, expected


def fp8_config(block=(128, 128)) -> dict:
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": list(block)}


# -- MXFP4 (gpt-oss) --------------------------------------------------------------------------

def mxfp4_layer(base: str, w: np.ndarray) -> tuple[dict, np.ndarray]:
    """w [..., rows, in] -> `base_blocks` [..., rows, in/32, 16] and `base_scales` E8M0: the
    shared exponent floor(log2(amax)) - 2 (OCP MX), codes the nearest E2M1 value, the first
    value of each pair in the low nibble (as transformers unpacks it)."""
    *lead, rows, in_f = w.shape
    x = w.reshape(-1, in_f // 32, 32).astype(F32)
    amax = np.abs(x).max(-1)
    e = np.clip(np.floor(np.log2(np.maximum(amax, 2.0 ** -126))) - 2, -127, 127).astype(np.int64)
    scale = np.ldexp(F32(1), e).astype(F32)
    y = np.clip(x / scale[..., None], -6, 6)
    codes = np.abs(y[..., None] - E2M1[:8][None, None, None, :] * np.sign(y)[..., None]).argmin(-1)
    codes = codes | (np.signbit(y) << 3)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    expected = (E2M1[codes] * scale[..., None]).reshape(w.shape)
    t = {base + "_blocks": blocks.reshape(*lead, rows, in_f // 32, 16),
         base + "_scales": (e + 127).astype(np.uint8).reshape(*lead, rows, in_f // 32)}
    return t, expected


# -- bitsandbytes (the real library on the CPU) -----------------------------------------------

def bnb4_layer_real(base: str, w: np.ndarray, quant_type="nf4", nested=True, blocksize=64):
    import bitsandbytes.functional as F
    import torch

    packed, state = F.quantize_4bit(torch.from_numpy(w), blocksize=blocksize, quant_type=quant_type,
                                    compress_statistics=nested)
    t = {base + ".weight": packed.numpy()}
    for k, v in state.as_dict(packed=True).items():
        t[base + ".weight." + k] = v.numpy()
    return t, bnb4_reference(packed, state)


def bnb4_reference(packed, state) -> np.ndarray:
    """bitsandbytes' own dequantization: its PyTorch-native implementation (default backend).
    Its CPU C kernel (0.50) mis-assigns absmax blocks when a row is not a whole number of
    blocks (it disagrees with its own quantize_4bit there); for whole-block rows both agree."""
    import bitsandbytes.functional as F
    import torch
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    absmax = state.absmax
    if state.nested:
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
    code = _get_4bit_code(state.quant_type, packed.device)
    out = _dequantize_4bit_compute(packed.reshape(-1), absmax.float(), code, state.blocksize,
                                   state.shape, torch.float32)
    if state.shape[-1] % state.blocksize == 0:  # where the C kernel is right, it agrees
        assert torch.equal(out, F.dequantize_4bit(packed, state).float())
    return out.numpy()


def bnb_int8_layer_real(base: str, w: np.ndarray):
    import bitsandbytes.functional as F
    import torch

    cb, scb, _ = F.int8_vectorwise_quant(torch.from_numpy(w).half())
    t = {base + ".weight": cb.numpy(), base + ".SCB": scb.float().numpy(),
         base + ".weight_format": np.zeros((), np.uint8)}
    return t, F.int8_vectorwise_dequant(cb, scb.float()).numpy()


def bnb_config(four=True, quant_type="nf4", nested=True) -> dict:
    return {"quant_method": "bitsandbytes", "load_in_4bit": four, "load_in_8bit": not four,
            "bnb_4bit_quant_type": quant_type, "bnb_4bit_use_double_quant": nested,
            "bnb_4bit_compute_dtype": "float32"}


# -- compressed-tensors (the real compressors on the CPU) -------------------------------------

def ct_args(fmt: str, bits=4, strategy="group", group=32, sym=True, block=None, typ="int") -> dict:
    w = {"num_bits": bits, "type": typ, "symmetric": sym, "strategy": strategy,
         "group_size": group if strategy in ("group", "tensor_group") else None,
         "block_structure": list(block) if block else None, "dynamic": False}
    return w


def ct_config(fmt: str, weights: dict, ignore=("lm_head",)) -> dict:
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": None, "output_activations": None,
                                          "format": fmt}},
            "ignore": list(ignore), "kv_cache_scheme": None}


def _ct_scales(w, args: dict):
    """Min-max scale and zero point in the library's shapes for each strategy."""
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.utils import calculate_qparams

    qa = QuantizationArgs(**args)
    x = torch.from_numpy(w)
    out_f, in_f = x.shape
    if qa.strategy == "tensor":
        lo, hi = x.min().reshape(1), x.max().reshape(1)
    elif qa.strategy == "channel":
        lo, hi = x.min(1, keepdim=True).values, x.max(1, keepdim=True).values
    elif qa.strategy in ("group", "tensor_group"):
        g = x.reshape(out_f, in_f // qa.group_size, qa.group_size)
        lo, hi = g.min(-1).values, g.max(-1).values
    else:
        br, bc = qa.block_structure
        sr, sc = -(-out_f // br), -(-in_f // bc)
        pad = torch.zeros(sr * br, sc * bc)
        pad[:out_f, :in_f] = x
        b = pad.reshape(sr, br, sc, bc).transpose(1, 2)
        lo, hi = b.amin((-1, -2)), b.amax((-1, -2))
    scale, zp = calculate_qparams(lo, hi, qa)
    return qa, scale, zp


def ct_layer_real(base: str, w: np.ndarray, fmt: str, args: dict):
    """Quantize and compress one Linear weight with compressed-tensors' own compressor;
    the reference is the same compressor's decompress."""
    import torch
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme

    qa, scale, zp = _ct_scales(w, args)
    scheme = QuantizationScheme(targets=["Linear"], weights=qa)
    state = {"weight": torch.from_numpy(w), "weight_scale": scale}
    if not qa.symmetric:
        state["weight_zero_point"] = zp
    if fmt == "nvfp4-pack-quantized":
        amax = torch.from_numpy(np.abs(w).max(keepdims=True).reshape(1))
        gscale = (448.0 * 6.0 / amax).float()
        g = torch.from_numpy(w).reshape(w.shape[0], -1, 16).abs().amax(-1)
        state = {"weight": torch.from_numpy(w), "weight_global_scale": gscale,
                 "weight_scale": (g / 6.0 * gscale).to(torch.float8_e4m3fn).float()}
    comp = BaseCompressor.load_from_registry(fmt)
    packed = comp.compress(dict(state), scheme)
    ref = comp.decompress({k: v.clone() for k, v in packed.items()}, scheme)["weight"]
    t = {base + "." + k: _np(v) for k, v in packed.items()}
    return t, ref.float().numpy()


def _np(v):
    import torch

    if v.dtype == torch.float8_e4m3fn:
        return v.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    if v.dtype == torch.bfloat16:
        return v.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return v.numpy()


# -- grouping by hand (what formats/hubquant does at open) --------------------------------------

def _logical(name, main, shape, quant):
    return TensorInfo(name, main.dtype, tuple(shape), main.file, main.offset, main.length,
                      quant=quant, extra={"packed_shape": main.shape})


def group(ckpt) -> None:
    """Replace each quantized layer's components in ckpt.tensors by one logical tensor."""
    cfg = (ckpt.metadata.get("config.json") or {}).get("quantization_config") or {}
    method = cfg.get("quant_method")
    t = dict(ckpt.tensors)
    if any(v.quant for v in t.values()):
        return  # the format side grouped them already
    out: dict[str, TensorInfo] = {}
    done: set[str] = set()
    for name, info in t.items():
        if name in done:
            continue
        logical = _group_one(ckpt, t, name, method, cfg)
        if logical is None:
            out[name] = info
            continue
        out[logical.name] = logical
        done.update(v.name for v in logical.quant.parts.values())
    ckpt.tensors = {k: v for k, v in out.items() if k not in done or v.quant}
    # the MLX grouping's false "scales without weight" errors on GPTQ/AWQ (the format side
    # stops MLX from claiming them)
    ckpt.findings = [f for f in ckpt.findings if not f.code.startswith("mlx_")]


def _group_one(ckpt, t, name, method, cfg):
    if method in ("gptq", "awq") and name.endswith(".qweight"):
        base = name[:-8]
        qw = t[name]
        roles = {r: t[base + "." + r] for r in ("qweight", "qzeros", "scales", "g_idx") if base + "." + r in t}
        bits = cfg.get("bits", 4)
        if method == "gptq":
            shape = (qw.shape[1], qw.shape[0] * 32 // bits)
            q = dict(codec="gptq", label=f"GPTQ_Q{bits}", bits=bits, group_size=cfg.get("group_size"),
                     sym=cfg.get("sym", True), act_order=cfg.get("desc_act", False),
                     checkpoint_format=cfg.get("checkpoint_format", "gptq"))
        else:
            version = cfg.get("version", "gemm")
            shape = (qw.shape[1] * 8, qw.shape[0]) if version == "gemm" else (qw.shape[0], qw.shape[1] * 8)
            q = dict(codec="awq", label="AWQ_Q4", bits=4, group_size=cfg.get("group_size"),
                     sym=False, version=version)
        return _logical(base + ".weight", qw, shape, Quant(**q, parts=roles))
    if method == "bitsandbytes" and name.endswith(".weight") and name + ".absmax" in t:
        qs_name = next(k for k in t if k.startswith(name + ".quant_state."))
        qs = t[qs_name]
        state = json.loads(ckpt.read_bytes(qs.offset, qs.length, qs.file))
        roles = {"weight": t[name], "quant_state": qs}
        for r in ("absmax", "quant_map", "nested_absmax", "nested_quant_map"):
            if name + "." + r in t:
                roles[r] = t[name + "." + r]
        q = Quant(codec="bnb_4bit", label=f"BNB_{state['quant_type'].upper()}", bits=4,
                  group_size=state["blocksize"], sym=True, quant_type=state["quant_type"],
                  dequant_dtype=state.get("dtype"), nested="nested_blocksize" in state,
                  nested_group_size=state.get("nested_blocksize"),
                  nested_offset=state.get("nested_offset"), parts=roles)
        return _logical(name, t[name], state["shape"], q)
    if method == "bitsandbytes" and name.endswith(".weight") and name[:-7] + ".SCB" in t:
        roles = {"weight": t[name], "SCB": t[name[:-7] + ".SCB"]}
        if name + "_format" in t:
            roles["weight_format"] = t[name + "_format"]
        return _logical(name, t[name], t[name].shape, Quant(codec="bnb_int8", label="BNB_INT8",
                                                            bits=8, sym=True, parts=roles))
    if method == "compressed-tensors" and (name.endswith(".weight_packed") or (
            name.endswith(".weight") and name + "_scale" in t)):
        base = name.rsplit(".", 1)[0]
        w = (cfg["config_groups"]["group_0"]["weights"])
        fmt = cfg["format"]
        kind = {"pack-quantized": "ct_pack", "int-quantized": "ct_int", "naive-quantized": "ct_int",
                "float-quantized": "ct_float", "nvfp4-pack-quantized": "ct_nvfp4",
                "mxfp4-pack-quantized": "ct_mxfp4"}[fmt]
        roles = {r: t[base + "." + r] for r in ("weight_packed", "weight", "weight_scale", "weight_zero_point",
                                                "weight_shape", "weight_global_scale") if base + "." + r in t}
        main = roles.get("weight_packed") or roles["weight"]
        if kind == "ct_pack":
            ws = roles["weight_shape"]
            shape = tuple(np.frombuffer(ckpt.read_bytes(ws.offset, ws.length, ws.file), "<i8").tolist())
        elif kind in ("ct_nvfp4", "ct_mxfp4"):
            shape = (main.shape[0], main.shape[1] * 2)
        else:
            shape = main.shape
        block = w.get("block_structure")
        q = Quant(codec=kind, label=kind.upper(), bits=w["num_bits"], group_size=w.get("group_size"),
                  sym=w.get("symmetric", True), strategy=w.get("strategy"),
                  block=tuple(block) if block else None, parts=roles)
        return _logical(base + ".weight", main, shape, q)
    if method == "fp8" and name.endswith(".weight") and name + "_scale_inv" in t:
        block = cfg.get("weight_block_size")
        roles = {"weight": t[name], "weight_scale_inv": t[name + "_scale_inv"]}
        return _logical(name, t[name], t[name].shape, Quant(codec="fp8_block", label=f"FP8_E4M3_B{block[0]}",
                                                            bits=8, sym=True, block=tuple(block), parts=roles))
    if method == "mxfp4" and name.endswith("_blocks"):
        base = name[:-7]
        b, s = t[name], t[base + "_scales"]
        shape = tuple(b.shape[:-2]) + (b.shape[-2] * 32,)
        return _logical(base, b, shape, Quant(codec="mxfp4", label="MXFP4", bits=4, group_size=32,
                                              sym=True, parts={"blocks": b, "scales": s}))
    return None


def open_grouped(folder):
    import model_explorer as mx

    ckpt = mx.open(str(folder))
    group(ckpt)
    return ckpt


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))

