"""GGUF block codecs: raw blocks (uint8, one row per block) -> float32 values, and block scales.

Each decoder mirrors gguf-py's `gguf.quants` arithmetic operation for operation (same
float32 products and sums, in the same order), so results are bit-identical to
`gguf.quants.dequantize`; the tests check that. They are faster because they unpack with
small lookup tables and write into a preallocated output instead of chaining temporaries.

Byte order: quantized blocks are always little-endian, also in big-endian GGUF files
(gguf-py byte-swaps numpy arrays before writing, which leaves uint8 block arrays alone);
only the plain types (F32, F16, BF16, I8..I64, F64) are swapped, and those are decoded as
plain dtypes by `read.py`, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..formats.gguf_constants import QUANT_SIZES, GGMLType

QK_K = 256
F16 = np.dtype("<f2")
F32 = np.float32


@dataclass(frozen=True)
class Codec:
    """How to decode one ggml block type.

    decode(blocks, out): blocks is uint8 (n, block_bytes); writes float32 (n, block_elems).
    scales(blocks): the main per-block scale `d` as float32 (n,) (or (n, k) for several), or None.
    delegated: True when the values come from gguf-py itself (exotic IQ types).
    """

    name: str
    block_elems: int
    block_bytes: int
    decode: Callable[[np.ndarray, np.ndarray], None]
    scales: Callable[[np.ndarray], np.ndarray] | None
    delegated: bool = False


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The fp16 field at byte `at` of every block, as float32 (n, 1)."""
    return blocks[:, at:at + 2].view(F16).astype(F32)


def _f16_scale(at: int):
    return lambda blocks: blocks[:, at:at + 2].view(F16).astype(F32).ravel()


# byte -> its two nibbles (low first), as uint8 and as float32
_NIB = np.stack([np.arange(256) & 0x0F, np.arange(256) >> 4], axis=-1).astype(np.uint8)
_NIB_F = _NIB.astype(F32)
# byte -> its eight bits, LSB first; byte -> its four 2-bit fields, lowest first
_BITS = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(np.uint8)
_CRUMBS = ((np.arange(256)[:, None] >> (2 * np.arange(4))) & 3).astype(np.uint8)


def _nibbles_split(qs: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2k) codes: all low nibbles, then all high nibbles (ggml's order)."""
    nib = _NIB[qs]  # (n, k, 2)
    return nib.transpose(0, 2, 1).reshape(qs.shape[0], -1)


# -- 32-element blocks -------------------------------------------------------------------

def _q4_0(blocks, out):
    d = _f16(blocks, 0)
    # gguf-py: (q & 15) as int8 - 8, then float32, then d * q
    q = _NIB_F[blocks[:, 2:]] - F32(8)  # exact small integers, same as its int8 path
    np.multiply(d, q.transpose(0, 2, 1).reshape(len(blocks), 32), out=out)


def _q4_1(blocks, out):
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _NIB_F[blocks[:, 4:]].transpose(0, 2, 1).reshape(len(blocks), 32)
    np.multiply(d, q, out=out)
    out += m


def _q5_codes(blocks, qh_at: int, qs_at: int) -> np.ndarray:
    n = len(blocks)
    high = _BITS[blocks[:, qh_at:qh_at + 4]].reshape(n, 32)  # bit j of the u32 is element j
    low = _nibbles_split(blocks[:, qs_at:qs_at + 16])
    return low | (high << 4)


def _q5_0(blocks, out):
    d = _f16(blocks, 0)
    q = _q5_codes(blocks, 2, 6).astype(np.int8) - np.int8(16)
    np.multiply(d, q.astype(F32), out=out)


def _q5_1(blocks, out):
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    np.multiply(d, _q5_codes(blocks, 4, 8).astype(F32), out=out)
    out += m


def _q8_0(blocks, out):
    d = _f16(blocks, 0)
    np.multiply(blocks[:, 2:].view(np.int8), d, out=out)


_IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                          dtype=F32)
_IQ4_NL_BYTE = _IQ4_NL_VALUES[_NIB]  # byte -> (value of low nibble, value of high nibble)


def _iq4_nl(blocks, out):
    d = _f16(blocks, 0)
    q = _IQ4_NL_BYTE[blocks[:, 2:]].transpose(0, 2, 1).reshape(len(blocks), 32)
    np.multiply(d, q, out=out)


# -- 256-element super-blocks (k-quants) --------------------------------------------------

def _q2_k(blocks, out):
    n = len(blocks)
    scales = blocks[:, :16]
    d, dmin = _f16(blocks, 80), _f16(blocks, 82)
    dl = (d * (scales & 0xF).astype(F32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).astype(F32)).reshape(n, 16, 1)
    # qs: 2 x 32 bytes; each 32-byte half holds 4 shifted 2-bit planes of 32 elements
    q = _CRUMBS[blocks[:, 16:80].reshape(n, 2, 32)].transpose(0, 1, 3, 2)  # (n, 2, 4, 32)
    q = q.reshape(n, 16, 16).astype(F32)
    o = out.reshape(n, 16, 16)
    np.multiply(dl, q, out=o)
    o -= ml


def _q3_k(blocks, out):
    n = len(blocks)
    hmask, qs, sc = blocks[:, :32], blocks[:, 32:96], blocks[:, 96:108]
    d = _f16(blocks, 108)
    low = _NIB[sc[:, :8]].transpose(0, 2, 1).reshape(n, 16)
    high = _CRUMBS[sc[:, 8:12]].transpose(0, 2, 1).reshape(n, 16)
    scales = ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(F32)
    dl = (d * scales).reshape(n, 16, 1)
    ql = _CRUMBS[qs.reshape(n, 2, 32)].transpose(0, 1, 3, 2).reshape(n, 16, 16)
    qh = _BITS[hmask].transpose(0, 2, 1).reshape(n, 16, 16) ^ np.uint8(1)
    q = (ql.astype(np.int8) - (qh << 2).astype(np.int8)).astype(F32)
    np.multiply(dl, q, out=out.reshape(n, 16, 16))


def _k_scale_min(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and 8 six-bit mins packed into 12 bytes (Q4_K, Q5_K)."""
    n = len(sc)
    s = sc.reshape(n, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    scale = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mins = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return scale, mins


def _q4_k(blocks, out):
    n = len(blocks)
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, m = _k_scale_min(blocks[:, 4:16])
    dl = (d * sc.astype(F32)).reshape(n, 8, 1)
    dm = (dmin * m.astype(F32)).reshape(n, 8, 1)
    q = _NIB_F[blocks[:, 16:].reshape(n, 4, 32)].transpose(0, 1, 3, 2).reshape(n, 8, 32)
    o = out.reshape(n, 8, 32)
    np.multiply(dl, q, out=o)
    o -= dm


def _q5_k(blocks, out):
    n = len(blocks)
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, m = _k_scale_min(blocks[:, 4:16])
    dl = (d * sc.astype(F32)).reshape(n, 8, 1)
    dm = (dmin * m.astype(F32)).reshape(n, 8, 1)
    qh = _BITS[blocks[:, 16:48]].transpose(0, 2, 1)  # (n, 8, 32): plane j = bit j
    ql = _NIB[blocks[:, 48:].reshape(n, 4, 32)].transpose(0, 1, 3, 2).reshape(n, 8, 32)
    q = (ql | (qh << 4)).astype(F32)
    o = out.reshape(n, 8, 32)
    np.multiply(dl, q, out=o)
    o -= dm


def _q6_k(blocks, out):
    n = len(blocks)
    ql, qh = blocks[:, :128], blocks[:, 128:192]
    scales = blocks[:, 192:208].view(np.int8).astype(F32)
    d = _f16(blocks, 208)
    dl = (d * scales).reshape(n, 16, 1)
    low = _NIB[ql.reshape(n, 2, 64)].transpose(0, 1, 3, 2).reshape(n, 8, 32)
    high = _CRUMBS[qh.reshape(n, 2, 32)].transpose(0, 1, 3, 2).reshape(n, 8, 32)
    q = ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(F32)
    np.multiply(dl, q.reshape(n, 16, 16), out=out.reshape(n, 16, 16))


def _iq4_xs(blocks, out):
    n = len(blocks)
    d = _f16(blocks, 0)
    sh = blocks[:, 2:4].view("<u2").astype(np.uint16)  # (n, 1)
    low = _NIB[blocks[:, 4:8]].reshape(n, 8)
    high = ((sh >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    scales = ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(F32)
    dl = (d * scales).reshape(n, 8, 1)
    q = _IQ4_NL_BYTE[blocks[:, 8:].reshape(n, 8, 16)].transpose(0, 1, 3, 2).reshape(n, 8, 32)
    np.multiply(dl, q, out=out.reshape(n, 8, 32))


def _q8_k(blocks, out):
    # Not in gguf-py: float32 d, 256 int8 codes, then 16 int16 sums used only by matmuls.
    d = blocks[:, :4].view("<f4").astype(F32)
    np.multiply(blocks[:, 4:260].view(np.int8), d, out=out)


# -- ternary and fp4 types ------------------------------------------------------------------

def _tq1_0(blocks, out):
    n = len(blocks)
    d = _f16(blocks, 52)
    pow3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)
    qs0 = (blocks[:, :32].reshape(n, 1, 32) * pow3.reshape(1, 5, 1)).reshape(n, -1)
    qs1 = (blocks[:, 32:48].reshape(n, 1, 16) * pow3.reshape(1, 5, 1)).reshape(n, -1)
    qh = (blocks[:, 48:52].reshape(n, 1, 4) * pow3[:4].reshape(1, 4, 1)).reshape(n, -1)
    q = np.concatenate([qs0, qs1, qh], axis=-1)
    q = ((q.astype(np.uint16) * 3) >> 8).astype(np.int8) - np.int8(1)
    np.multiply(d, q.astype(F32), out=out)


def _tq2_0(blocks, out):
    n = len(blocks)
    d = _f16(blocks, 64)
    q = _CRUMBS[blocks[:, :64].reshape(n, 2, 32)].transpose(0, 1, 3, 2).reshape(n, 256)
    np.multiply(d, (q.astype(np.int8) - np.int8(1)).astype(F32), out=out)


_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=F32)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml_e8m0_to_fp32_half: 2**(e - 128) as float32, subnormal for e < 2."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(F32)


def _mxfp4(blocks, out):
    n = len(blocks)
    d = _e8m0_half(blocks[:, :1])
    q = _MXFP4_VALUES[_NIB[blocks[:, 1:]]].transpose(0, 2, 1).reshape(n, 32)
    np.multiply(d, q, out=out)


# -- delegated to gguf-py -----------------------------------------------------------------

def _delegate(name: str):
    """Decoders for the grid-based IQ types and NVFP4 come from gguf-py itself.

    Their lattice tables are large and gguf-py's decoders are already vectorised; we call
    them on exactly the blocks a read needs, so slicing and sampling still stay cheap.
    """
    def decode(blocks, out):
        from gguf import GGMLQuantizationType
        from gguf.quants import _type_traits

        q = _type_traits[GGMLQuantizationType[name]]
        q.init_grid()
        out[...] = q.dequantize_blocks(np.ascontiguousarray(blocks))
    return decode


def _nvfp4_scales(blocks):
    x = blocks[:, :4]
    exp = (x >> 3).astype(np.int32) & 0xF
    man = (x & 0x7).astype(F32)
    raw = np.where(exp == 0, man * 2.0 ** -9, (1.0 + man / 8.0) * 2.0 ** (exp - 7).astype(F32))
    return np.where((x == 0) | (x == 0x7F), 0.0, raw * 0.5).astype(F32)


_OWN = {
    "Q4_0": (_q4_0, _f16_scale(0)),
    "Q4_1": (_q4_1, _f16_scale(0)),
    "Q5_0": (_q5_0, _f16_scale(0)),
    "Q5_1": (_q5_1, _f16_scale(0)),
    "Q8_0": (_q8_0, _f16_scale(0)),
    "Q2_K": (_q2_k, _f16_scale(80)),
    "Q3_K": (_q3_k, _f16_scale(108)),
    "Q4_K": (_q4_k, _f16_scale(0)),
    "Q5_K": (_q5_k, _f16_scale(0)),
    "Q6_K": (_q6_k, _f16_scale(208)),
    "Q8_K": (_q8_k, lambda b: b[:, :4].view("<f4").astype(F32).ravel()),
    "IQ4_NL": (_iq4_nl, _f16_scale(0)),
    "IQ4_XS": (_iq4_xs, _f16_scale(0)),
    "TQ1_0": (_tq1_0, _f16_scale(52)),
    "TQ2_0": (_tq2_0, _f16_scale(64)),
    "MXFP4": (_mxfp4, lambda b: _e8m0_half(b[:, 0])),
}
_DELEGATED = {
    "IQ2_XXS": _f16_scale(0), "IQ2_XS": _f16_scale(0), "IQ2_S": _f16_scale(0),
    "IQ3_XXS": _f16_scale(0), "IQ3_S": _f16_scale(0), "IQ1_S": _f16_scale(0),
    "IQ1_M": None,  # its scale is spread over the block's 4-bit sub-scales
    "NVFP4": _nvfp4_scales,
}


def _build() -> dict[str, Codec]:
    codecs = {}
    for name, (dec, sc) in _OWN.items():
        elems, nbytes = QUANT_SIZES[GGMLType[name]]
        codecs[name] = Codec(name, elems, nbytes, dec, sc)
    for name, sc in _DELEGATED.items():
        elems, nbytes = QUANT_SIZES[GGMLType[name]]
        codecs[name] = Codec(name, elems, nbytes, _delegate(name), sc, delegated=True)
    return codecs


CODECS: dict[str, Codec] = _build()

# Plain ggml types: decoded as ordinary dtypes (with the file's byte order).
GGML_PLAIN = {"F32": "F32", "F16": "F16", "BF16": "BF16", "F64": "F64",
              "I8": "I8", "I16": "I16", "I32": "I32", "I64": "I64"}
# Known to ggml but not decodable here, with the reason.
UNSUPPORTED = {
    "Q8_1": "Q8_1 is an intermediate type for activations; its block layout changed between "
            "ggml versions and no reference decoder exists",
    "Q1_0": "Q1_0 has no reference decoder in gguf-py to check against",
}


def dequantize_blocks(name: str, blocks: np.ndarray) -> np.ndarray:
    """Decode (n, block_bytes) uint8 blocks of one ggml type to float32 (n, block_elems)."""
    codec = CODECS[name]
    out = np.empty((len(blocks), codec.block_elems), dtype=F32)
    if len(blocks):
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are data, not errors
            codec.decode(blocks, out)
    return out
