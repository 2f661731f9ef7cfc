"""Hub quantization schemes: dequantize throughput next to the reference path, same run.

- GPTQ 4-bit (act-order) and AWQ 4-bit GEMM: `Checkpoint.read` vs a straightforward numpy port
  of the libraries' own dequantization (AutoGPTQ's torch path: shift, mask, +1,
  scales[g_idx] * (q - z); AutoAWQ's unpack_awq + reverse_awq_order + dequantize_gemm), which
  need a GPU to install;
- NF4 (double quant): vs bitsandbytes.functional.dequantize_4bit on the CPU;
- FP8 128x128 blocks: vs transformers' Fp8Dequantize on the CPU.
Target: ratio (reference time / ours) >= 1.0. Then the bytes a row slice reads.

    .venv/bin/python benchmarks/bench_hubquant.py [--small]   (--small: 1024 x 1024 layers)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from quant_codec import layouts as L  # noqa: E402

from model_explorer.tensors import read as R  # noqa: E402

BASE = "model.layers.0.mlp.down_proj"
NAME = BASE + ".weight"


def best(fn, repeat=3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def gptq_reference(t: dict, bits=4) -> np.ndarray:
    """AutoGPTQ's dequantization (qlinear torch path, with g_idx), in numpy."""
    qw = t[BASE + ".qweight"].view(np.uint32)
    qz = t[BASE + ".qzeros"].view(np.uint32)
    s = t[BASE + ".scales"].astype(np.float32)
    g = t[BASE + ".g_idx"]
    wf = np.arange(0, 32, bits, dtype=np.uint32)
    w = ((qw[:, None, :] >> wf[None, :, None]) & 15).reshape(-1, qw.shape[1])  # [in, out]
    z = (((qz[:, :, None] >> wf[None, None, :]) & 15) + 1).reshape(qz.shape[0], -1)
    return (s[g] * (w.astype(np.float32) - z[g])).T


def awq_reference(t: dict) -> np.ndarray:
    """AutoAWQ's unpack_awq, reverse_awq_order and dequantize_gemm, in numpy."""
    qw, qz = t[BASE + ".qweight"].view(np.uint32), t[BASE + ".qzeros"].view(np.uint32)
    s = t[BASE + ".scales"].astype(np.float32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    rev = np.array([0, 4, 1, 5, 2, 6, 3, 7])
    iw = ((qw[:, :, None] >> shifts) & 15).reshape(qw.shape[0], -1, 8)[:, :, rev].reshape(qw.shape[0], -1)
    iz = ((qz[:, :, None] >> shifts) & 15).reshape(qz.shape[0], -1, 8)[:, :, rev].reshape(qz.shape[0], -1)
    gs = qw.shape[0] // s.shape[0]
    return ((iw - np.repeat(iz, gs, axis=0)).astype(np.float32) * np.repeat(s, gs, axis=0)).T


def main() -> None:
    small = "--small" in sys.argv
    out_f = in_f = 1024 if small else 4096
    w = L.weight(out_f, in_f)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = {}
        t, _ = L.gptq_layer(BASE, w, 4, 128, sym=False, desc_act=True)
        cases["GPTQ 4-bit g128 act-order"] = (t, L.gptq_config(4, 128, False, True),
                                              lambda t=t: gptq_reference(t), "numpy port of AutoGPTQ")
        t, _ = L.awq_layer(BASE, w, 128)
        cases["AWQ 4-bit GEMM g128"] = (t, L.awq_config(128), lambda t=t: awq_reference(t),
                                        "numpy port of AutoAWQ")
        try:
            import bitsandbytes.functional as F
            import torch

            packed, state = F.quantize_4bit(torch.from_numpy(w), blocksize=64, quant_type="nf4",
                                            compress_statistics=True)
            t = {BASE + ".weight": packed.numpy(),
                 **{BASE + ".weight." + k: v.numpy() for k, v in state.as_dict(packed=True).items()}}
            cases["NF4 double-quant b64"] = (t, L.bnb_config(), lambda: F.dequantize_4bit(packed, state),
                                             "bitsandbytes dequantize_4bit")
        except ImportError:
            pass
        t, _ = L.fp8_block_layer(BASE, w, (128, 128))
        try:
            import torch
            from transformers.integrations.finegrained_fp8 import Fp8Dequantize

            q = torch.from_numpy(t[BASE + ".weight"].view(np.uint8)).view(torch.float8_e4m3fn)
            s = torch.from_numpy(t[BASE + ".weight_scale_inv"])

            def ref(q=q, s=s):
                return Fp8Dequantize(None)._dequantize_one(q, s, torch.float32)
            cases["FP8 E4M3 128x128"] = (t, L.fp8_config(), ref, "transformers Fp8Dequantize")
        except ImportError:
            pass
        for label, (t, quant, ref, ref_name) in cases.items():
            ckpt = L.open_grouped(L.write_folder(tmp / label.split()[0], t, quant))
            ckpt.read(NAME)
            ours = best(lambda ckpt=ckpt: ckpt.read(NAME))
            theirs = best(ref)
            plan = R.plan_for(ckpt, ckpt.tensors[NAME])
            main_bytes = R.raw_units(ckpt, plan, 100, 108).nbytes  # what the slice gathers
            rows.append((label, w.size / ours / 1e6, w.size / theirs / 1e6, theirs / ours, ref_name,
                         main_bytes, ckpt.tensors[NAME].length))
            ckpt.close()
    print(f"{'scheme':28} {'ours Mw/s':>10} {'ref Mw/s':>10} {'ratio':>6}  reference")
    for label, a, b, r, ref_name, *_ in rows:
        print(f"{label:28} {a:10.1f} {b:10.1f} {r:6.2f}  {ref_name}")
    print(f"\nrow slice [100:108] of a {out_f} x {in_f} layer: main-tensor bytes gathered")
    for label, *_, main_bytes, total in rows:
        print(f"{label:28} {main_bytes:>10,} of {total:,} ({100 * main_bytes / total:.2f}%)"
              "  + the scales/zeros of those rows")


if __name__ == "__main__":
    main()
