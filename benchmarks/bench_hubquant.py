"""Dequantize throughput of the Hub quantization codecs beside a reference path, same run:
bitsandbytes' own CPU dequantize_4bit for NF4; for GPTQ, AWQ and block FP8 (whose libraries
dequantize on the GPU) a straightforward numpy port of the library's torch dequantization.

    python benchmarks/bench_hubquant.py [--out 4096 --in 4096]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from quant_codec import packers as P  # noqa: E402
from quant_format import layouts as L  # noqa: E402

import model_explorer as mx  # noqa: E402

M = "model.layers.0.mlp.down_proj"


def best(fn, n=3):
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def ref_gptq(qw, qz, sc, g_idx, bits=4):
    """AutoGPTQ's torch dequantization (shifts by wf, zeros + 1, scales[g_idx]) in numpy."""
    wf = np.arange(0, 32, bits, dtype=np.int32)
    z = (qz[:, :, None] >> wf) & 15
    z = z.reshape(qz.shape[0], -1) + 1
    w = (qw[:, None, :] >> wf[None, :, None]) & 15
    w = w.reshape(-1, qw.shape[1])
    return (sc[g_idx].astype(np.float32) * (w - z[g_idx])).T


def ref_awq(qw, qz, sc, group):
    """AutoAWQ's dequantize_gemm (unpack, reverse the AWQ order, (w - z) * s) in numpy."""
    shifts = np.arange(0, 32, 4, dtype=np.int32)
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    w = ((qw[:, :, None] >> shifts) & 15).reshape(qw.shape[0], -1, 8)[:, :, order].reshape(qw.shape[0], -1)
    z = ((qz[:, :, None] >> shifts) & 15).reshape(qz.shape[0], -1, 8)[:, :, order].reshape(qz.shape[0], -1)
    z = np.repeat(z, group, 0)
    s = np.repeat(sc.astype(np.float32), group, 0)
    return ((w - z) * s).T


def ref_fp8(w8, s, b=128):
    """transformers' FP8 block dequantization: weight.float() * scale_inv per block."""
    out, inp = w8.shape
    full = np.repeat(np.repeat(s, b, 0), b, 1)[:out, :inp]
    return w8.astype(np.float32) * full


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=int, default=4096)
    ap.add_argument("--in", dest="inp", type=int, default=4096)
    a = ap.parse_args()
    out, inp = a.out, a.inp
    rng = np.random.default_rng(0)
    rows = []
    tmp = Path(tempfile.mkdtemp())
    mb = out * inp * 4 / 1e6  # float32 output megabytes

    # GPTQ 4-bit g128
    qi = rng.integers(1, 16, (inp, out))
    zeros = rng.integers(1, 16, (inp // 128, out))
    sc = (rng.random((inp // 128, out)) * 0.01 + 1e-3).astype(np.float16)
    g = np.arange(inp) // 128
    qw, qz = P.pack_gptq_rows(qi, 4), P.pack_gptq_zeros((zeros - 1) & 15, 4)
    parts = {"qweight": ("I32", qw.shape, qw.tobytes()), "qzeros": ("I32", qz.shape, qz.tobytes()),
             "scales": ("F16", sc.shape, sc.tobytes()),
             "g_idx": ("I32", (inp,), g.astype(np.int32).tobytes())}
    ck = mx.open(str(P.folder(tmp / "gptq", {M: parts}, {"quant_method": "gptq", "bits": 4,
                                                          "group_size": 128})))
    ours = best(lambda: ck.read(M + ".weight"))
    ref = best(lambda: ref_gptq(qw, qz, sc, g))
    assert np.array_equal(ck.read(M + ".weight"), ref_gptq(qw, qz, sc, g))
    rows.append(("GPTQ 4-bit g128", ours, ref, "numpy port of AutoGPTQ", qw.nbytes // out * 8))

    # AWQ 4-bit g128
    qa = P.pack_awq_gemm(qi)
    za = P.pack_awq_gemm(zeros)
    parts = {"qweight": ("I32", qa.shape, qa.tobytes()), "qzeros": ("I32", za.shape, za.tobytes()),
             "scales": ("F16", sc.shape, sc.tobytes())}
    ck = mx.open(str(P.folder(tmp / "awq", {M: parts}, {"quant_method": "awq", "bits": 4,
                                                         "group_size": 128, "version": "gemm"})))
    ours = best(lambda: ck.read(M + ".weight"))
    ref = best(lambda: ref_awq(qa, za, sc, 128))
    assert np.array_equal(ck.read(M + ".weight"), ref_awq(qa, za, sc, 128))
    rows.append(("AWQ 4-bit g128", ours, ref, "numpy port of AutoAWQ", qa.nbytes // out * 8))

    # FP8 block 128x128
    w8 = (rng.standard_normal((out, inp)) * 50).astype(ml_dtypes.float8_e4m3fn)
    s = (rng.random((-(-out // 128), -(-inp // 128))) * 1e-3 + 1e-4).astype(np.float32)
    t, q = L.fp8_block((128, 128), ())
    t[M + ".weight"] = ("F8_E4M3", (out, inp), w8.tobytes())
    t[M + ".weight_scale_inv"] = ("F32", s.shape, s.tobytes())
    ck = mx.open(str(L.write(tmp / "fp8", t, q)))
    ours = best(lambda: ck.read(M + ".weight"))
    ref = best(lambda: ref_fp8(w8, s))
    assert np.array_equal(ck.read(M + ".weight"), ref_fp8(w8, s))
    rows.append(("FP8 E4M3 block 128", ours, ref, "numpy port of transformers", inp * 8))

    # NF4 (double quant) against bitsandbytes itself
    try:
        import torch
        from bitsandbytes import functional as F
        from safetensors.torch import save_file
        wt = torch.randn(out, inp) * 0.02
        packed, st = F.quantize_4bit(wt, blocksize=64, quant_type="nf4", compress_statistics=True)
        tensors = {k: torch.zeros(v[1], dtype=torch.float16) for k, v in L.plain().items()}
        tensors[M + ".weight"] = packed
        tensors.update({M + ".weight." + k: v for k, v in st.as_dict(packed=True).items()})
        (tmp / "nf4").mkdir()
        save_file(tensors, str(tmp / "nf4" / "model.safetensors"))
        import json
        (tmp / "nf4" / "config.json").write_text(json.dumps(L.config({
            "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True})))
        ck = mx.open(str(tmp / "nf4"))
        ours = best(lambda: ck.read(M + ".weight"))
        ref = best(lambda: F.dequantize_4bit(packed, st))
        assert np.array_equal(ck.read(M + ".weight"), F.dequantize_4bit(packed, st).numpy())
        rows.append(("NF4 double-quant", ours, ref, f"bitsandbytes {torch.__version__} CPU "
                     "dequantize_4bit", inp * 4))
    except ImportError as e:
        print(f"NF4 skipped: {e}")

    print(f"[{out} x {inp}] -> float32 ({mb:.0f} MB)")
    print(f"{'scheme':22} {'ours ms':>8} {'MB/s':>7} {'ref ms':>8} {'MB/s':>7}  ratio  reference; "
          "one-row slice bits read")
    for name, o, r, what, rowbits in rows:
        print(f"{name:22} {o * 1e3:8.1f} {mb / o:7.0f} {r * 1e3:8.1f} {mb / r:7.0f}  "
              f"{r / o:5.2f}x  {what}; {rowbits // 8} bytes of codes per output row")


if __name__ == "__main__":
    main()
