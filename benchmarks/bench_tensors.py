"""Tensor-data figures, each next to its reference from the same run.

1. Dequantization throughput, Q4_K / Q6_K / Q8_0 through `Checkpoint.read` on a GGUF file
   vs `gguf.quants.dequantize` on the same blocks; MLX 4-bit vs a straightforward numpy
   unpack (mlx itself when installed). Target: ratio >= 1.0.
2. Exact stats of a 1 GiB BF16 tensor: extra peak memory (tracemalloc) < 256 MB, and time
   within 5x of one numpy pass converting the same bytes to float32.
3. Sampled stats of every tensor here: < 0.3 s each.

    .venv/bin/python benchmarks/bench_tensors.py [--small]   (--small: 64 MiB instead of 1 GiB)
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import model_explorer as mx  # noqa: E402

ELEMENTS = 1 << 24  # 16M values per dequantization tensor


def best(fn, repeat=3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def gguf_file(folder: str) -> str:
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(0)
    path = os.path.join(folder, "bench.gguf")
    w = gguf.GGUFWriter(path, "llama")
    for name in ("Q4_K", "Q6_K", "Q8_0"):
        elems, nbytes = gguf.GGML_QUANT_SIZES[Q[name]]
        raw = rng.integers(0, 256, size=(ELEMENTS // elems, nbytes), dtype=np.uint8)
        at = {"Q6_K": [208], "Q4_K": [0, 2], "Q8_0": [0]}[name]
        for a in at:  # finite fp16 scales
            raw[:, a:a + 2] = rng.normal(0, 0.01, size=(len(raw), 1)).astype("<f2").view(np.uint8)
        w.add_tensor(name, raw.reshape(4096, -1), raw_dtype=Q[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def bench_gguf(folder: str) -> None:
    import gguf

    path = gguf_file(folder)
    ckpt = mx.open(path)
    reader = gguf.GGUFReader(path)
    print(f"1. dequantization, {ELEMENTS / 1e6:.1f}M values per tensor (million values/s, best of 3)")
    for t in reader.tensors:
        data = np.array(t.data)  # both sides read from memory: decoding speed only
        ours = best(lambda n=t.name: ckpt.read(n))
        ref = best(lambda d=data, q=t.tensor_type: gguf.quants.dequantize(d, q))
        same = np.array_equal(ckpt.read(t.name).view(np.uint32),
                              gguf.quants.dequantize(data, t.tensor_type).view(np.uint32))
        print(f"   {t.name:6s} ours {ELEMENTS / ours / 1e6:7.1f}   gguf-py {ELEMENTS / ref / 1e6:7.1f}"
              f"   ratio {ref / ours:5.2f}   identical: {same}")
    ckpt.close()


def mlx_dir(folder: str, rows: int = 4096, cols: int = 4096, group: int = 64):
    rng = np.random.default_rng(1)
    packed = rng.integers(0, 2**32, size=(rows, cols // 8), dtype=np.uint32)
    scales = rng.normal(size=(rows, cols // group)).astype(np.float16)
    biases = rng.normal(size=(rows, cols // group)).astype(np.float16)
    from safetensors.numpy import save_file

    d = os.path.join(folder, "mlx")
    os.makedirs(d, exist_ok=True)
    save_file({"l.weight": packed, "l.scales": scales, "l.biases": biases}, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"quantization": {"bits": 4, "group_size": group}}, f)
    return d, packed, scales, biases


def numpy_mlx4(packed, scales, biases, group):
    """The obvious numpy dequantization of MLX 4-bit: shift each word 8 times."""
    q = (packed[..., None] >> np.arange(0, 32, 4, dtype=np.uint32)) & 0xF
    q = q.reshape(packed.shape[0], -1, group).astype(np.float32)
    return (scales.astype(np.float32)[..., None] * q + biases.astype(np.float32)[..., None]).reshape(
        packed.shape[0], -1)


def bench_mlx(folder: str) -> None:
    d, packed, scales, biases = mlx_dir(folder)
    ckpt = mx.open(d)
    n = packed.size * 8
    ours = best(lambda: ckpt.read("l.weight"))
    ref = best(lambda: numpy_mlx4(packed, scales, biases, 64))
    same = np.array_equal(ckpt.read("l.weight"), numpy_mlx4(packed, scales, biases, 64))
    print(f"   MLX_Q4 ours {n / ours / 1e6:7.1f}   numpy   {n / ref / 1e6:7.1f}   ratio {ref / ours:5.2f}"
          f"   identical: {same}")
    try:
        import mlx.core as mxc

        w, s, b = mxc.array(packed), mxc.array(scales), mxc.array(biases)
        t = best(lambda: mxc.eval(mxc.dequantize(w, s, b, group_size=64, bits=4)))
        print(f"   MLX_Q4 mlx  {n / t / 1e6:7.1f}   ratio ours/mlx {t / ours:5.2f}")
    except ImportError:
        print("   (mlx is not installed: compared with numpy only)")
    ckpt.close()


def bf16_file(folder: str, nbytes: int) -> str:
    """A safetensors file holding one BF16 tensor of `nbytes`, written in slices (no big array)."""
    n = nbytes // 2
    rows = n // 4096
    header = json.dumps({"big": {"dtype": "BF16", "shape": [rows, 4096], "data_offsets": [0, rows * 8192]}}).encode()
    header += b" " * (-len(header) % 8)
    path = os.path.join(folder, "bf16.safetensors")
    rng = np.random.default_rng(2)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        block = (rng.normal(size=(1024, 4096)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        for _ in range(rows // 1024):
            f.write(block.tobytes())
    return path


def bench_exact_stats(folder: str, nbytes: int) -> str:
    import ml_dtypes

    path = bf16_file(folder, nbytes)
    ckpt = mx.open(path)
    ckpt.stats("big")  # map the file and warm the page cache with one sampled pass
    src = ckpt.byte_source()
    info = ckpt.tensors["big"]
    view = np.frombuffer(src.buffer, dtype=ml_dtypes.bfloat16, count=info.numel, offset=info.offset)
    np.asarray(view[:: 1 << 12]).sum()
    ref = best(lambda: view.astype(np.float32), repeat=2)
    tracemalloc.start()
    t = time.perf_counter()
    s = ckpt.stats("big", exact=True)
    ours = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"2. exact stats of a {nbytes / 2**30:.2f} GiB BF16 tensor ({info.numel / 1e6:.0f}M values)")
    print(f"   ours {ours:6.2f} s   one numpy bf16->float32 pass {ref:6.2f} s   ratio {ours / ref:5.2f} "
          f"(target <= 5)")
    print(f"   extra peak memory {peak / 2**20:6.1f} MB (target < 256 MB); mean {s.mean:.5f} std {s.std:.5f}")
    ckpt.close()
    return path


def bench_sampled(paths: list[str]) -> None:
    print("3. sampled stats (target < 0.3 s each)")
    worst = 0.0
    for path in paths:
        ckpt = mx.open(path)
        times = {}
        for name in ckpt.tensors:
            t = time.perf_counter()
            s = ckpt.stats(name)
            times[name] = (time.perf_counter() - t, s)
        for name, (dt, s) in sorted(times.items(), key=lambda kv: -kv[1][0])[:4]:  # the slowest
            worst = max(worst, dt)
            print(f"   {name:24s} {s.dtype:7s} {s.total / 1e6:8.1f}M values  {dt:6.3f} s  ({s.sample})")
        if len(times) > 4:
            print(f"   ... and {len(times) - 4} faster tensors of {os.path.basename(path)}")
        ckpt.close()
    print(f"   slowest {worst:.3f} s")


def main() -> None:
    small = "--small" in sys.argv
    with tempfile.TemporaryDirectory() as folder:
        bench_gguf(folder)
        bench_mlx(folder)
        big = bench_exact_stats(folder, (64 if small else 1024) * 2**20)
        bench_sampled([os.path.join(folder, "bench.gguf"), os.path.join(folder, "mlx"), big,
                       mx.sample_path()])


if __name__ == "__main__":
    main()
