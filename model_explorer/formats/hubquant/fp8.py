"""Fine-grained FP8 (quant_method "fp8", DeepSeek-V3 style) and MXFP4 (gpt-oss).

From transformers' integrations: FP8Linear has `weight` float8_e4m3fn [out, in] and
`weight_scale_inv` float32 (or UE8M0 with scale_fmt "ue8m0") [ceil(out/br), ceil(in/bc)]
for weight_block_size [br, bc], a scalar without one. gpt-oss experts store `X_blocks` uint8
[..., rows, in/32, 16] (two E2M1 codes a byte) and `X_scales` uint8 E8M0 [..., rows, in/32].
"""

from __future__ import annotations

from ...records import Quant, TensorInfo
from ...tensormap import records_of
from .common import block_pair, cdiv, finding, logical, shape_text, unusable

FP8_DTYPES = ("F8_E4M3", "F8_E5M2")

def build_fp8_block(layer, scheme, add, inferred: bool):
    p = layer.parts
    w, s = p.get("weight"), p["weight_scale_inv"]
    if w is None:
        add(finding("quant_missing_companion", f"{s.name!r} has no "
                    f"{layer.base + '.weight'!r} to scale.", s))
        return None
    if not w.dtype.startswith("F8") or len(w.shape) < 2:
        add(finding("quant_packed_shape", f"{w.name!r} has FP8 block scales "
                    f"({s.name!r}), so it should be float8 [out, in]; it is {shape_text(w)}.", w))
        return unusable(w, "fp8_block", "FP8", "not an FP8 matrix")
    out, in_f = w.shape[-2], w.shape[-1]
    lead = tuple(w.shape[:-2])
    block = scheme.params.get("block_size") if scheme and scheme.layout == "fp8_block" else None
    if block is None and s.numel > 1 and len(s.shape) == len(w.shape):
        # no config: DeepSeek's 128 x 128 when it fits, else what the scale grid implies
        so, si = s.shape[-2], s.shape[-1]
        block = [128, 128] if (cdiv(out, 128), cdiv(in_f, 128)) == (so, si) else \
            [cdiv(out, so), cdiv(in_f, si)]
    if block is None:
        if s.numel != 1:
            add(finding("quant_groups_mismatch", f"{s.name!r} is {shape_text(s)}; without "
                        "weight_block_size the FP8 scale is one value per tensor.", s,
                        expected=[], found=list(s.shape)))
        label = "FP8_E4M3"
    else:
        want = lead + (cdiv(out, block[0]), cdiv(in_f, block[1]))
        if tuple(s.shape) != want:
            add(finding("quant_groups_mismatch", f"{s.name!r} is {shape_text(s)}; "
                        f"weight {list(w.shape)} in blocks of {block[0]}x{block[1]} needs "
                        f"{list(want)} scales.", s, expected=list(want),
                        found=list(s.shape)))
        label = _block_label(block)
    return _fp8_logical(w, s, block, label, inferred)


def _block_label(block) -> str:
    return f"FP8_E4M3_B{block[0]}" if block[0] == block[1] else f"FP8_E4M3_B{block[0]}x{block[1]}"


def _fp8_logical(w: TensorInfo, s: TensorInfo, block, label: str, inferred: bool,
                 pair: tuple[int, int] | None = None) -> TensorInfo:
    """`pair`: block_pair(block), where the caller folds many layers of one block size."""
    if w.dtype == "F8_E5M2":
        label = label.replace("E4M3", "E5M2")
    quant = Quant(codec="fp8_block", label=label, bits=8, sym=True,
                  block=pair if pair is not None else block_pair(block), scale_dtype=s.dtype,
                  parts={"weight": w, "weight_scale_inv": s})
    return logical(w.name, w, w.shape, quant, inferred)


def group_regular(tensors, scheme, crowded: set[str]) -> tuple[list[TensorInfo], list[str]]:
    """The layers of a block-FP8 model (DeepSeek-V3: tens of thousands of expert matrices)
    that need no finding, folded in one pass: what `build_fp8_block` would make of each, without
    the per-layer machinery. A layer goes the per-layer way (and gets its findings there) when
    anything is unusual: no `.weight`, a weight that is not a 2-D FP8 matrix, a scale grid of
    another shape, or components of another family on the same prefix (`crowded`).
    Returns the logical tensors and the names of the components they absorbed."""
    block = scheme.params.get("block_size") if scheme is not None and scheme.layout == "fp8_block" else None
    if block is None:
        return [], []
    b0, b1 = block
    label, pair = _block_label(block), block_pair(block)
    pairs = [(n[: -len("_scale_inv")], n) for n in tensors if n.endswith(".weight_scale_inv")]
    pairs = [(w, s) for w, s in pairs if w in tensors and w[: -len(".weight")] not in crowded]
    names = [n for pair in pairs for n in pair]
    records = records_of(tensors, names)
    out: list[TensorInfo] = []
    absorbed: list[str] = []
    for w, s in zip(records[0::2], records[1::2]):
        shape = w.shape
        if w.dtype not in FP8_DTYPES or len(shape) != 2 or \
                s.shape != (-(-shape[0] // b0), -(-shape[1] // b1)):
            continue  # the per-layer way says what is wrong
        out.append(_fp8_logical(w, s, block, label, False, pair))
        absorbed += (w.name, s.name)
    return out, absorbed


def build_mxfp4(layer, scheme, add, inferred: bool):
    p = layer.parts
    b, s = p["blocks"], p.get("scales")
    if s is None:
        add(finding("quant_missing_companion", f"{b.name!r} holds MXFP4 codes but "
                    f"{layer.base + '_scales'!r} (the E8M0 exponents) is missing.", b))
        return unusable(b, "mxfp4", "MXFP4", "no _scales")
    if b.dtype != "U8" or len(b.shape) < 2 or b.shape[-1] != 16:
        add(finding("quant_packed_shape", f"{b.name!r} should be uint8 [..., blocks, 16] "
                    f"(32 E2M1 codes per block); it is {shape_text(b)}.", b))
        return unusable(b, "mxfp4", "MXFP4", "not uint8 [..., blocks, 16]")
    if tuple(s.shape) != tuple(b.shape[:-1]) or s.dtype not in ("U8", "F8_E8M0"):
        add(finding("quant_groups_mismatch", f"{s.name!r} is {shape_text(s)}; the "
                    f"blocks {list(b.shape)} need one uint8 exponent each: "
                    f"{list(b.shape[:-1])}.", s, expected=list(b.shape[:-1]), found=list(s.shape)))
    shape = tuple(b.shape[:-2]) + (b.shape[-2] * 32,)
    quant = Quant(codec="mxfp4", label="MXFP4", bits=4, group_size=32, sym=True,
                  parts={"blocks": b, "scales": s})
    return logical(layer.base, b, shape, quant, inferred)
