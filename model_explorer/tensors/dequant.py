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

from ..ggml import QUANT_SIZES, GGMLType

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


# -- code extraction: bit operations into small uint8 arrays (no lookup gathers) ---------------

_SH4 = np.array([0, 2, 4, 6], dtype=np.uint8)
_SH8 = np.arange(8, dtype=np.uint8)


def nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., k) bytes -> (..., 2, k): the low nibbles, then the high nibbles (ggml's order)."""
    out = np.empty(qs.shape[:-1] + (2, qs.shape[-1]), dtype=np.uint8)
    np.bitwise_and(qs, 15, out=out[..., 0, :])
    np.right_shift(qs, 4, out=out[..., 1, :])
    return out


def crumbs(qs: np.ndarray) -> np.ndarray:
    """(..., k) bytes -> (..., 4, k): the 2-bit fields at shifts 0, 2, 4, 6."""
    out = qs[..., None, :] >> _SH4[:, None]
    out &= 3
    return out


def bitplanes(qs: np.ndarray) -> np.ndarray:
    """(..., k) bytes -> (..., 8, k): bit j of every byte in plane j."""
    out = qs[..., None, :] >> _SH8[:, None]
    out &= 1
    return out


def q5_codes(blocks: np.ndarray, qh_at: int, qs_at: int) -> np.ndarray:
    """Q5_0/Q5_1: 4 low bits from nibbles, bit j of a u32 as the 5th bit of element j."""
    n = len(blocks)
    q = nibbles(blocks[:, qs_at:qs_at + 16]).reshape(n, 32)
    q |= np.unpackbits(blocks[:, qh_at:qh_at + 4], axis=1, bitorder="little") << 4
    return q


def k_scale_min(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and 8 six-bit mins packed into 12 bytes (Q4_K, Q5_K)."""
    n = len(sc)
    s = sc.reshape(n, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    scale = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mins = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return scale, mins


def signed6(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """4 low bits and 2 high bits -> a 6-bit value minus 32, as int8."""
    q = (low | (high << 4)).view(np.int8)
    q -= 32
    return q


def _minus(q: np.ndarray, k: int) -> np.ndarray:
    """uint8 codes minus k, in place, as int8 (codes < 128)."""
    q = q.view(np.int8)
    q -= k
    return q


# Stored integer codes of each type, in element order (signed where the type offsets them).
def codes_q4_0(b):
    return _minus(nibbles(b[:, 2:]).reshape(len(b), 32), 8)


def codes_q4_1(b):
    return nibbles(b[:, 4:]).reshape(len(b), 32)


def codes_q5_0(b):
    return _minus(q5_codes(b, 2, 6), 16)


def codes_q5_1(b):
    return q5_codes(b, 4, 8)


def codes_q2_k(b):
    return crumbs(b[:, 16:80].reshape(len(b), 2, 32)).reshape(len(b), 256)


def codes_q3_k(b):
    n = len(b)
    ql = crumbs(b[:, 32:96].reshape(n, 2, 32)).reshape(n, 256).view(np.int8)
    high = bitplanes(b[:, :32]).reshape(n, 256)
    high ^= 1
    high <<= 2  # the offset 4 applies where the high bit is 0
    ql -= high.view(np.int8)
    return ql


def scales_q3_k(b):
    n = len(b)
    return signed6(nibbles(b[:, 96:104]).reshape(n, 16), crumbs(b[:, 104:108]).reshape(n, 16))


def codes_q4_k(b):
    return nibbles(b[:, 16:].reshape(len(b), 4, 32)).reshape(len(b), 256)


def codes_q5_k(b):
    q = nibbles(b[:, 48:].reshape(len(b), 4, 32)).reshape(len(b), 256)
    q |= bitplanes(b[:, 16:48]).reshape(len(b), 256) << 4
    return q


def codes_q6_k(b):
    n = len(b)
    q = nibbles(b[:, :128].reshape(n, 2, 64)).reshape(n, 256)
    q |= crumbs(b[:, 128:192].reshape(n, 2, 32)).reshape(n, 256) << 4
    return _minus(q, 32)


def codes_iq4_xs(b):
    return nibbles(b[:, 8:].reshape(len(b), 8, 16)).reshape(len(b), 256)


def scales_iq4_xs(b):
    n = len(b)
    sh = b[:, 2:4].view("<u2").astype(np.uint16)
    high = ((sh >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    low = nibbles(b[:, 4:8])  # (n, 2, 4): interleaved, byte i gives sub-blocks 2i and 2i+1
    return signed6(low.transpose(0, 2, 1).reshape(n, 8), high)


def codes_tq2_0(b):
    return _minus(crumbs(b[:, :64].reshape(len(b), 2, 32)).reshape(len(b), 256), 1)


def _fill(out: np.ndarray, q: np.ndarray, d: np.ndarray, m: np.ndarray | None = None) -> None:
    """out = d * q (- m): the codes converted exactly, then gguf-py's float32 operations."""
    np.multiply(q, d, out=out)  # q becomes float32 exactly, then one float32 multiply: one pass
    if m is not None:
        out -= m


# -- decoders ---------------------------------------------------------------------------------

def _q4_0(b, out):
    _fill(out, codes_q4_0(b), _f16(b, 0))


def _q4_1(b, out):
    _fill(out, codes_q4_1(b), _f16(b, 0))
    out += _f16(b, 2)


def _q5_0(b, out):
    _fill(out, codes_q5_0(b), _f16(b, 0))


def _q5_1(b, out):
    _fill(out, codes_q5_1(b), _f16(b, 0))
    out += _f16(b, 2)


def _q8_0(b, out):
    _fill(out, b[:, 2:].view(np.int8), _f16(b, 0))


def _q8_k(b, out):
    # Not in gguf-py: float32 d, 256 int8 codes, then 16 int16 sums used only by matmuls.
    _fill(out, b[:, 4:260].view(np.int8), b[:, :4].view("<f4").astype(F32))


def _q2_k(b, out):
    n = len(b)
    sc = b[:, :16]
    d, dmin = _f16(b, 80), _f16(b, 82)
    dl = (d * (sc & 0xF).astype(F32)).reshape(n, 16, 1)
    ml = (dmin * (sc >> 4).astype(F32)).reshape(n, 16, 1)
    _fill(out.reshape(n, 16, 16), codes_q2_k(b).reshape(n, 16, 16), dl, ml)


def _q3_k(b, out):
    n = len(b)
    dl = (_f16(b, 108) * scales_q3_k(b).astype(F32)).reshape(n, 16, 1)
    _fill(out.reshape(n, 16, 16), codes_q3_k(b).reshape(n, 16, 16), dl)


def _k_dl_dm(b):
    n = len(b)
    sc, m = k_scale_min(b[:, 4:16])
    dl = (_f16(b, 0) * sc.astype(F32)).reshape(n, 8, 1)
    dm = (_f16(b, 2) * m.astype(F32)).reshape(n, 8, 1)
    return dl, dm


def _q4_k(b, out):
    dl, dm = _k_dl_dm(b)
    _fill(out.reshape(len(b), 8, 32), codes_q4_k(b).reshape(len(b), 8, 32), dl, dm)


def _q5_k(b, out):
    dl, dm = _k_dl_dm(b)
    _fill(out.reshape(len(b), 8, 32), codes_q5_k(b).reshape(len(b), 8, 32), dl, dm)


def _q6_k(b, out):
    n = len(b)
    dl = (_f16(b, 208) * b[:, 192:208].view(np.int8).astype(F32)).reshape(n, 16, 1)
    _fill(out.reshape(n, 16, 16), codes_q6_k(b).reshape(n, 16, 16), dl)


_IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                          dtype=np.int8)


def _iq4_nl(b, out):
    idx = nibbles(b[:, 2:]).reshape(len(b), 32)
    _fill(out, np.take(_IQ4_NL_VALUES, idx), _f16(b, 0))


def _iq4_xs(b, out):
    n = len(b)
    dl = (_f16(b, 0) * scales_iq4_xs(b).astype(F32)).reshape(n, 8, 1)
    q = np.take(_IQ4_NL_VALUES, codes_iq4_xs(b)).reshape(n, 8, 32)
    _fill(out.reshape(n, 8, 32), q, dl)


def _tq1_0(b, out):
    n = len(b)
    pow3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)
    qs0 = (b[:, :32].reshape(n, 1, 32) * pow3.reshape(1, 5, 1)).reshape(n, -1)
    qs1 = (b[:, 32:48].reshape(n, 1, 16) * pow3.reshape(1, 5, 1)).reshape(n, -1)
    qh = (b[:, 48:52].reshape(n, 1, 4) * pow3[:4].reshape(1, 4, 1)).reshape(n, -1)
    q = np.concatenate([qs0, qs1, qh], axis=-1)
    q = ((q.astype(np.uint16) * 3) >> 8).astype(np.int8) - np.int8(1)
    _fill(out, q, _f16(b, 52))


def _tq2_0(b, out):
    _fill(out, codes_tq2_0(b), _f16(b, 64))


_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml_e8m0_to_fp32_half: 2**(e - 128) as float32, subnormal for e < 2."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(F32)


def _mxfp4(b, out):
    idx = nibbles(b[:, 1:]).reshape(len(b), 32)
    _fill(out, np.take(_MXFP4_VALUES, idx), _e8m0_half(b[:, :1]))


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
