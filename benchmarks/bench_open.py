"""Opening speed and memory: model_explorer against gguf-py and safetensors, same files, same run.

    .venv/bin/python benchmarks/bench_open.py [--quick] [--only shards,fp8,million]

1. A GGUF with a Llama-3-size tokenizer (128,256 tokens, 280,147 merges) and 291 tensor
   infos over a sparse data region: open and list tensors + metadata keys, vs gguf.GGUFReader,
   warm (best of 5 in this process) and in a fresh process (`import model_explorer` done, the
   open's first-use imports counted; bytecode cached as an installed package has it). Target:
   50x gguf-py's reader, in a fresh process.
2. A 163-shard safetensors index with 90,000 tensors: open as one model, vs safetensors
   safe_open on every shard (keys, dtypes, shapes), in the same run. Target: at most 2.0x
   safe_open's wall time. Opening builds neither tensor records nor spans (they are built
   when asked); the span count is taken once, outside the timing.
2a. The same scale quantized as DeepSeek-V3 ships it: 163 shards of FP8 expert matrices, each
   with its 128x128 `weight_scale_inv` (93,696 tensors folded into 46,848 logical ones) and
   config.json's quantization_config, vs safe_open over the same shards. Target: 2.0x.
   `mlx`: the same as mlx-community's 4-bit (weight, scales, biases; keys sorted as MLX writes);
   `gptq`: as GPTQModel writes a 4-bit MoE (qweight, qzeros, scales, g_idx per projection).
2b. Headroom: a 500-shard index of 1,000,000 tensors (sparse data): open in under 10 s, with
   tracemalloc peak and RSS growth printed, next to safe_open over the same shards.
3. Opening never reads tensor data: a 100 MB and a 2 GB sparse file (safetensors and GGUF);
   tracemalloc peak, RSS growth and LocalSource.bytes_read stay flat.

--quick shrinks the tokenizer and the shard count (for a smoke run); targets apply to the full run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import struct
import sys
import tempfile
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import model_explorer as mx  # noqa: E402

GGUF_TARGET_RATIO = 50
SHARD_TARGET_RATIO = 2.0  # our wall time / safe_open's
MILLION_TARGET_S = 10.0


def best_of(fn, repeat: int) -> tuple[float, float]:
    """Best wall time and best CPU time (the CPU figure stays honest on a shared, busy machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def _ms(wall_cpu: tuple[float, float]) -> str:
    return f"{wall_cpu[0] * 1000:8.1f} ms (CPU {wall_cpu[1] * 1000:7.1f})"


# -- 1. Llama-3 tokenizer GGUF -------------------------------------------------------------

def make_llama3_gguf(path: str, n_tokens: int, n_merges: int) -> int:
    """gguf-py writes the header (291 Q4_K tensor infos, Llama-3-8B shapes); the data is sparse."""
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(32)
    w.add_context_length(8192)
    w.add_embedding_length(4096)
    w.add_feed_forward_length(14336)
    w.add_head_count(32)
    w.add_head_count_kv(8)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([f"\u0120tok{i}" if i % 3 else f"t{i:x}" for i in range(n_tokens)])
    w.add_token_types([1] * n_tokens)
    w.add_token_merges([f"\u0120a{i % 977} b{i}" for i in range(n_merges)])
    q4k = gguf.GGMLQuantizationType.Q4_K

    def info(name, shape, qtype=q4k):
        numel = int(np.prod(shape))
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        w.add_tensor_info(name, shape, np.dtype(np.float32), numel // block * size, raw_dtype=qtype)

    f32 = gguf.GGMLQuantizationType.F32
    info("token_embd.weight", (n_tokens_rows := 128256, 4096))
    for i in range(32):
        info(f"blk.{i}.attn_norm.weight", (4096,), f32)
        info(f"blk.{i}.attn_q.weight", (4096, 4096))
        info(f"blk.{i}.attn_k.weight", (1024, 4096))
        info(f"blk.{i}.attn_v.weight", (1024, 4096))
        info(f"blk.{i}.attn_output.weight", (4096, 4096))
        info(f"blk.{i}.ffn_norm.weight", (4096,), f32)
        info(f"blk.{i}.ffn_gate.weight", (14336, 4096))
        info(f"blk.{i}.ffn_up.weight", (14336, 4096))
        info(f"blk.{i}.ffn_down.weight", (4096, 14336))
    info("output_norm.weight", (4096,), f32)
    info("output.weight", (n_tokens_rows, 4096))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    data = sum(w.ggml_pad(t.nbytes, w.data_alignment) for t in w.tensors[0].values())
    w.close()
    header = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(w.ggml_pad(header, w.data_alignment) + data)
    return header


def bench_gguf(tmp: str, quick: bool) -> bool:
    import gguf

    n_tokens, n_merges = (12_825, 28_014) if quick else (128_256, 280_147)
    path = os.path.join(tmp, "llama3.gguf")
    header = make_llama3_gguf(path, n_tokens, n_merges)

    def ours():
        ckpt = mx.open(path)
        return list(ckpt.tensors), list(ckpt.metadata)

    def reference():
        r = gguf.GGUFReader(path)
        return [t.name for t in r.tensors], [k for k in r.fields if not k.startswith("GGUF.")]

    mine = ours()
    t_ours = best_of(ours, 5)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    theirs = reference()  # ~15 s: once is enough
    t_ref = (time.perf_counter() - wall, time.process_time() - cpu)
    assert mine == theirs, "tensor names or metadata keys differ from gguf-py"
    fresh = fresh_open(path, tmp, 1 if quick else 5)
    ratio = t_ref[0] / t_ours[0]
    fresh_ratio = t_ref[0] / fresh[0]
    ok = fresh_ratio >= GGUF_TARGET_RATIO
    print(f"GGUF, {n_tokens:,} tokens + {n_merges:,} merges, {len(mine[0])} tensors "
          f"(header {header / 2**20:.1f} MiB, file {os.path.getsize(path) / 2**30:.1f} GiB sparse)")
    print(f"  open + list tensors and keys: model_explorer {_ms(t_ours)}   "
          f"gguf.GGUFReader {_ms(t_ref)}   ratio {ratio:6.1f}x (CPU {t_ref[1] / t_ours[1]:6.1f}x)")
    print(f"  the same in a fresh process:  model_explorer {_ms(fresh)}   "
          f"gguf.GGUFReader {_ms(t_ref)}   ratio {fresh_ratio:6.1f}x (CPU {t_ref[1] / fresh[1]:6.1f}x)   "
          f"(target >= {GGUF_TARGET_RATIO}x: {'met' if ok else 'MISSED'})")
    return ok


FRESH = """
import json, sys, time
import model_explorer as mx
t, c = time.perf_counter(), time.process_time()
ckpt = mx.open(sys.argv[1])
names, keys = list(ckpt.tensors), list(ckpt.metadata)
print(json.dumps([time.perf_counter() - t, time.process_time() - c]))
"""


def fresh_open(path: str, tmp: str, repeat: int) -> tuple[float, float]:
    """Median wall and CPU time of the open in new processes (after `import model_explorer`), its
    first-use imports included. Bytecode is cached under `tmp` by an untimed first run, as an
    installed package has it (a checkout run with PYTHONDONTWRITEBYTECODE would compile)."""
    import statistics
    import subprocess

    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"),
               PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    runs = []
    for i in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", FRESH, path], env=env, capture_output=True,
                             text=True, timeout=300, check=True)
        if i:
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


# -- 2. 163 shards, 90,000 tensors ---------------------------------------------------------

def _write_shard(d: str, s: int, n_shards: int, header: dict, data_bytes: int,
                 sort_keys: bool = False) -> str:
    """Shard `s` with a compact header (as the safetensors library writes; `sort_keys`: as MLX
    does) and sparse data."""
    raw = json.dumps(header, separators=(",", ":"), sort_keys=sort_keys).encode()
    raw += b" " * (-len(raw) % 8)
    fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
    with open(os.path.join(d, fname), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + data_bytes)
    return fname


def make_shards(d: str, n_shards: int, n_tensors: int) -> str:
    weight_map = {}
    per = -(-n_tensors // n_shards)
    total = 0
    for s in range(n_shards):
        names = [f"model.layers.{s}.mlp.experts.{j}.down_proj.weight" for j in range(per)]
        names = names[: max(0, min(per, n_tensors - s * per))]
        header, off = {}, 0
        for j, name in enumerate(names):
            shape = [16, 8 + j % 8]
            n = shape[0] * shape[1] * 2
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
        fname = _write_shard(d, s, n_shards, header, off)
        total += off
        weight_map.update(dict.fromkeys(names, fname))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return d


def _safe_open_all(d: str) -> int:
    from safetensors import safe_open

    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in dict.fromkeys(index["weight_map"].values()):
        with safe_open(os.path.join(d, shard), framework="numpy") as sf:
            for k in sf.keys():
                sl = sf.get_slice(k)
                out[k] = (sl.get_dtype(), sl.get_shape())
    return len(out)


def bench_shards(tmp: str, quick: bool) -> bool:
    n_shards, n_tensors = (17, 9_000) if quick else (163, 90_000)
    d = os.path.join(tmp, "shards")
    os.makedirs(d)
    make_shards(d, n_shards, n_tensors)

    def ours():
        ckpt = mx.open(d)
        assert not ckpt.findings, ckpt.findings[:3]
        ckpt.close()
        return len(ckpt.tensors)

    ckpt = mx.open(d)
    n_spans = len(ckpt.spans)  # builds every span: a check, not part of opening
    count = len(ckpt.tensors)
    ckpt.close()
    assert count == _safe_open_all(d) == n_tensors and not ckpt.findings
    return _against_safe_open(ours, d, f"Sharded safetensors, {n_shards} shards, {n_tensors:,} "
                              f"tensors ({n_spans:,} spans, built on demand)")


def _against_safe_open(ours, d: str, title: str) -> bool:
    """Best of 5 of `ours` and of safe_open over every shard of `d`, printed side by side."""
    t_ours = best_of(ours, 5)
    t_ref = best_of(lambda: _safe_open_all(d), 5)
    ratio = t_ours[0] / t_ref[0]
    ok = ratio <= SHARD_TARGET_RATIO
    print(title)
    print(f"  open as one model:            model_explorer {_ms(t_ours)}   "
          f"safetensors safe_open {_ms(t_ref)}   ours/theirs {ratio:5.2f}x "
          f"(CPU {t_ours[1] / t_ref[1]:5.2f}x)   (target <= {SHARD_TARGET_RATIO:.1f}x: "
          f"{'met' if ok else 'MISSED'})")
    return ok


# Each quantized layout: (what it is, the components of one expert projection as (suffix, dtype,
# shape, bytes), config.json, the label its logical tensors get, whether keys are sorted as MLX
# writes them).
QUANT_LAYOUTS = {
    "fp8": ("FP8 block-quantized (DeepSeek-V3 as shipped)",
            [(".weight", "F8_E4M3", [256, 256], 65536), (".weight_scale_inv", "F32", [2, 2], 16)],
            {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
             "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}},
            "FP8_E4M3_B128", False),
    "mlx": ("MLX 4-bit (DeepSeek-V3 as mlx-community ships it)",
            [(".weight", "U32", [256, 32], 32768), (".scales", "BF16", [256, 4], 2048),
             (".biases", "BF16", [256, 4], 2048)],
            {"model_type": "deepseek_v3", "quantization": {"group_size": 64, "bits": 4}},
            "MLX_Q4", True),
    "gptq": ("GPTQ 4-bit, group 128 (a 128-expert MoE as GPTQModel writes it)",
             [(".qweight", "I32", [32, 256], 32768), (".qzeros", "I32", [2, 32], 256),
              (".scales", "F16", [2, 256], 1024), (".g_idx", "I32", [256], 1024)],
             {"model_type": "qwen3_moe", "quantization_config": {
                 "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
                 "checkpoint_format": "gptq"}},
             "GPTQ_Q4", False),
}


def make_quant_shards(d: str, layout: str, n_shards: int, layers: int, experts: int) -> int:
    """DeepSeek-V3's expert layout at small sizes, every projection stored as `layout` says."""
    _, parts, config, _, sort_keys = QUANT_LAYOUTS[layout]
    names = [f"model.layers.{i}.mlp.experts.{e}.{p}" for i in range(layers) for e in range(experts)
             for p in ("gate_proj", "up_proj", "down_proj")]
    per = -(-len(names) // n_shards)
    weight_map = {}
    for s in range(n_shards):
        header, off = {}, 0
        for name in names[s * per:(s + 1) * per]:
            for suffix, dtype, shape, nbytes in parts:
                header[name + suffix] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
                off += nbytes
        if sort_keys:
            header = {"__metadata__": {"format": "mlx"}, **header}
        fname = _write_shard(d, s, n_shards, header, off, sort_keys)
        weight_map.update(dict.fromkeys((k for k in header if k != "__metadata__"), fname))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return len(weight_map)


def bench_quant(tmp: str, quick: bool, layout: str) -> bool:
    n_shards, layers, experts = (17, 6, 256) if quick else (163, 61, 256)
    what, parts, _, label, _ = QUANT_LAYOUTS[layout]
    d = os.path.join(tmp, layout)
    os.makedirs(d)
    stored = make_quant_shards(d, layout, n_shards, layers, experts)
    logical = stored // len(parts)

    def ours():
        ckpt = mx.open(d)
        assert not ckpt.findings, ckpt.findings[:3]
        ckpt.close()
        return ckpt

    ckpt = ours()
    assert ckpt.details["quantization"]["label"] == label and len(ckpt.tensors) == logical
    assert _safe_open_all(d) == stored
    return _against_safe_open(ours, d, f"{what}, {n_shards} shards, {stored:,} tensors -> {logical:,} logical")


def bench_million(tmp: str, quick: bool) -> bool:
    n_shards, n_tensors = (50, 100_000) if quick else (500, 1_000_000)
    d = os.path.join(tmp, "million")
    os.makedirs(d)
    make_shards(d, n_shards, n_tensors)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    ckpt = mx.open(d)
    t_ours = (time.perf_counter() - wall, time.process_time() - cpu)
    assert len(ckpt.tensors) == n_tensors and not ckpt.findings, ckpt.findings[:3]
    wall = time.perf_counter()
    first = ckpt.spans_for(ckpt.files[0])  # what the hexdump of one shard asks for
    t_spans = time.perf_counter() - wall
    ckpt.close()
    del ckpt
    peak, grown, _ = measure(lambda: (lambda c: (len(c.tensors), c.close))(mx.open(d)))
    wall, cpu = time.perf_counter(), time.process_time()
    assert _safe_open_all(d) == n_tensors
    t_ref = (time.perf_counter() - wall, time.process_time() - cpu)
    ok = t_ours[0] < MILLION_TARGET_S
    print(f"Sharded safetensors, {n_shards} shards, {n_tensors:,} tensors (headroom)")
    print(f"  open as one model:            model_explorer {_ms(t_ours)}   "
          f"safetensors safe_open {_ms(t_ref)}   ours/theirs {t_ours[0] / t_ref[0]:5.2f}x   "
          f"(target < {MILLION_TARGET_S:.0f} s: {'met' if ok else 'MISSED'})")
    print(f"  memory while opening: tracemalloc peak {peak / 2**20:7.1f} MiB, RSS +{grown / 2**20:7.1f} MiB; "
          f"spans of one shard on demand: {len(first):,} in {t_spans * 1000:.1f} ms")
    return ok


# -- 3. memory does not grow with file size ------------------------------------------------

def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(fn) -> tuple[int, int, object]:
    """tracemalloc peak and RSS growth while `fn()` runs; RSS is taken before `fn`'s result is
    released, so pages of the file it touched through mmap count."""
    gc.collect()
    rss = _rss()
    tracemalloc.start()
    value, release = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = _rss() - rss
    release()
    return peak, grown, value


def make_sparse(path: str, size: int, fmt: str) -> None:
    n_tensors = 64
    each = (size // n_tensors) // 4096 * 4096
    if fmt == "safetensors":
        header = {f"w{i}": {"dtype": "F32", "shape": [each // 4], "data_offsets": [i * each, (i + 1) * each]}
                  for i in range(n_tensors)}
        raw = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + n_tensors * each)
    else:
        import gguf

        w = gguf.GGUFWriter(path, "llama")
        for i in range(n_tensors):
            w.add_tensor_info(f"w{i}", (each // 4,), np.dtype(np.float32), each)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        header = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(w.ggml_pad(header, w.data_alignment) + n_tensors * each)


def bench_memory(tmp: str) -> bool:
    import gguf
    from safetensors import safe_open

    ok = True
    print("Memory while opening (tracemalloc peak / RSS growth / bytes read by the source)")
    for fmt in ("safetensors", "gguf"):
        rows = []
        for size in (100 * 2**20, 2 * 2**30):
            path = os.path.join(tmp, f"sparse_{size}.{fmt}")
            make_sparse(path, size, fmt)

            def ours(path=path):
                ckpt = mx.open(path)
                return ckpt.byte_source().bytes_read, ckpt.close

            def reference(path=path, fmt=fmt):
                if fmt == "gguf":
                    reader = gguf.GGUFReader(path)
                    return len(reader.tensors), lambda: None
                sf = safe_open(path, framework="numpy")
                return len(list(sf.keys())), lambda: None

            peak, rss, read = measure(ours)
            rpeak, rrss, _ = measure(reference)
            rows.append((peak, rss, read))
            ref_name = "gguf.GGUFReader" if fmt == "gguf" else "safetensors safe_open"
            print(f"  {fmt:<11} {size / 2**20:6.0f} MiB file: model_explorer peak {peak / 1024:7.1f} KiB, "
                  f"RSS +{rss / 1024:7.1f} KiB, read {read / 1024:6.1f} KiB   |   {ref_name} peak "
                  f"{rpeak / 1024:7.1f} KiB, RSS +{rrss / 1024:7.1f} KiB")
            os.unlink(path)
        (p1, r1, b1), (p2, r2, b2) = rows
        flat = p2 <= 1.5 * p1 + 64 * 1024 and b2 <= 1.5 * b1 + 4096 and r2 <= r1 + 4 * 2**20
        print(f"  {fmt:<11} 2 GiB / 100 MiB: peak x{p2 / p1:.2f}, bytes read x{b2 / max(b1, 1):.2f} "
              f"({'flat' if flat else 'GROWS'})")
        ok &= flat
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    parser.add_argument("--only", help="comma-separated: gguf,shards,fp8,mlx,gptq,million,memory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        only = args.only.split(",") if args.only else ["gguf", "shards", "fp8", "mlx", "gptq", "million", "memory"]
        benches = {"gguf": lambda: bench_gguf(tmp, args.quick),
                   "shards": lambda: bench_shards(tmp, args.quick),
                   "fp8": lambda: bench_quant(tmp, args.quick, "fp8"),
                   "mlx": lambda: bench_quant(tmp, args.quick, "mlx"),
                   "gptq": lambda: bench_quant(tmp, args.quick, "gptq"),
                   "million": lambda: bench_million(tmp, args.quick),
                   "memory": lambda: bench_memory(tmp)}
        results = [benches[name]() for name in only]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
