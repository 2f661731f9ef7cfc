"""Hand packers that follow each library's published pack loop word by word (AutoGPTQ
QuantLinear.pack, AutoAWQ WQLinear_GEMM/GEMV.from_linear), for libraries that need a GPU
to write; the tests round-trip a known float weight through them."""

from __future__ import annotations

import numpy as np
from quant_format import layouts as L

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def pack_gptq_rows(intweight: np.ndarray, bits: int) -> np.ndarray:
    """AutoGPTQ's loop over qweight rows: intweight [in, out] -> int32 [in*bits/32, out]."""
    iw = intweight.astype(np.uint32)
    q = np.zeros((iw.shape[0] * bits // 32, iw.shape[1]), np.uint32)
    i = row = 0
    while row < q.shape[0]:
        if bits in (2, 4, 8):
            for j in range(i, i + 32 // bits):
                q[row] |= iw[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        else:  # 3 bits: 32 codes over 3 words, two straddling
            for j in range(i, i + 10):
                q[row] |= iw[j] << (3 * (j - i))
            i += 10
            q[row] |= iw[i] << 30
            row += 1
            q[row] |= (iw[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                q[row] |= iw[j] << (3 * (j - i) + 1)
            i += 10
            q[row] |= iw[i] << 31
            row += 1
            q[row] |= (iw[i] >> 1) & 3
            i += 1
            for j in range(i, i + 10):
                q[row] |= iw[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
    return q.view(np.int32)


def pack_gptq_zeros(zeros: np.ndarray, bits: int) -> np.ndarray:
    """zeros [groups, out] -> qzeros [groups, out*bits/32]: the same loop along columns."""
    return pack_gptq_rows(zeros.T, bits).T.copy()


def gptq_layer(rng, out, inp, bits, group, act_order=False, v2=False, sym=False):
    """(tensors for one layer, the float weight they stand for)."""
    groups = -(-inp // group) if group > 0 else 1
    gs = group if group > 0 else inp
    g_idx = np.arange(inp) // gs
    if act_order:
        g_idx = rng.permutation(g_idx)
    maxq = (1 << bits) - 1
    scales = (rng.random((groups, out)) * 0.02 + 0.001).astype(np.float16)
    # v1 stores zero - 1, so a zero of 0 does not survive it (the loader reads 2**bits)
    zeros = np.full((groups, out), (maxq + 1) // 2) if sym else rng.integers(0 if v2 else 1, maxq + 1, (groups, out))
    q = rng.integers(0, maxq + 1, (inp, out))
    w = scales.astype(np.float32)[g_idx] * (q - zeros[g_idx]).astype(np.float32)
    stored_z = zeros if v2 else (zeros - 1) & maxq
    parts = {"qweight": ("I32", (inp * bits // 32, out), pack_gptq_rows(q, bits).tobytes()),
             "qzeros": ("I32", (groups, out * bits // 32), pack_gptq_zeros(stored_z, bits).tobytes()),
             "scales": ("F16", (groups, out), scales.tobytes()),
             "g_idx": ("I32", (inp,), g_idx.astype(np.int32).tobytes())}
    return parts, w.T.copy()


def pack_awq_gemm(iw: np.ndarray) -> np.ndarray:
    """intweight [in, out] -> [in, out/8]: word col holds outputs col*8 + AWQ_ORDER[i] in nibble i."""
    iw = iw.astype(np.uint32)
    q = np.zeros((iw.shape[0], iw.shape[1] // 8), np.uint32)
    for col in range(iw.shape[1] // 8):
        for i in range(8):
            q[:, col] |= iw[:, col * 8 + AWQ_ORDER[i]] << (i * 4)
    return q.view(np.int32)


def awq_layer(rng, out, inp, group):
    groups = inp // group
    scales = (rng.random((groups, out)) * 0.02 + 0.001).astype(np.float16)
    zeros = rng.integers(0, 16, (groups, out))
    q = rng.integers(0, 16, (inp, out))
    g = np.arange(inp) // group
    w = (q - zeros[g]).astype(np.float32) * scales.astype(np.float32)[g]
    parts = {"qweight": ("I32", (inp, out // 8), pack_awq_gemm(q).tobytes()),
             "qzeros": ("I32", (groups, out // 8), pack_awq_gemm(zeros).tobytes()),
             "scales": ("F16", (groups, out), scales.tobytes())}
    return parts, w.T.copy()


def folder(path, layers: dict, quant: dict):
    """A llama-shaped folder: plain tensors + each layer's parts under its module name."""
    t = {}
    for name, (dtype, shape) in L.plain().items():
        t[name] = (dtype, shape)
    for module, parts in layers.items():
        for role, spec in parts.items():
            t[f"{module}.{role}"] = spec
    return L.write(path, t, quant)
