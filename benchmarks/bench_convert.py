"""Convert the SmolLM2 sample (Q4_1 GGUF): our figure, a reference's figure, and the ratio.

1. GGUF Q4_1 -> GGUF Q8_0. Reference: gguf-py alone, the way its own scripts do it (GGUFReader
   + dequantize + quantize, every tensor added to a GGUFWriter, then written at once).
2. GGUF Q4_1 -> safetensors F32. Reference: transformers loading the GGUF (it dequantizes and
   un-permutes too), then safetensors.torch.save_file of the state dict (save_pretrained refuses
   GGUF-loaded models); skipped when accelerate is missing.
3. GGUF Q4_1 -> MLX 4-bit, group 64 (no reference: MLX itself does not run here).
Each case runs in a fresh process: seconds of the conversion, and the process's peak resident
memory (imports included, so torch's import shows in the transformers figure).

    .venv/bin/python benchmarks/bench_convert.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CASE = r"""
import json, os, resource, sys, time
import model_explorer as mx
from model_explorer.conversion import convert
case, sample, tmp = sys.argv[1], mx.sample_path(), sys.argv[2]

def gguf_py_requantize(dest):
    import gguf
    reader = gguf.GGUFReader(sample)
    writer = gguf.GGUFWriter(dest, "llama")
    for t in reader.tensors:
        data = gguf.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        qtype = gguf.GGMLQuantizationType.Q8_0 if data.ndim == 2 else gguf.GGMLQuantizationType.F32
        writer.add_tensor(t.name, gguf.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file(); writer.write_kv_data_to_file(); writer.write_tensors_to_file()
    writer.close()

def transformers_to_safetensors(dest):
    import accelerate, torch  # noqa: F401
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(sample), gguf_file=os.path.basename(sample),
                                                 dtype=torch.float32)
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not (k == "lm_head.weight" and model.config.tie_word_embeddings)}
    os.makedirs(dest, exist_ok=True)
    save_file(state, os.path.join(dest, "model.safetensors"))

runs = {
    "ours_q8": lambda: convert(sample, os.path.join(tmp, "o.gguf"), format="gguf", dtype="Q8_0"),
    "ref_q8": lambda: gguf_py_requantize(os.path.join(tmp, "r.gguf")),
    "ours_f32": lambda: convert(sample, os.path.join(tmp, "o-f32"), format="safetensors", dtype="F32"),
    "ref_f32": lambda: transformers_to_safetensors(os.path.join(tmp, "r-f32")),
    "ours_mlx4": lambda: convert(sample, os.path.join(tmp, "o-mlx"), format="mlx", bits=4, group_size=64),
}
t0 = time.perf_counter()
runs[case]()
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run(case: str, tmp: str) -> dict | None:
    proc = subprocess.run([sys.executable, "-c", CASE, case, tmp], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  ({case} failed: {last})")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(label: str, ours: dict | None, ref: dict | None) -> None:
    if ours is None:
        return
    line = f"{label:26s} ours {ours['seconds']:6.2f} s, peak RSS {ours['peak_rss'] / 2**20:5.0f} MiB"
    if ref is not None:
        line += (f" | reference {ref['seconds']:6.2f} s, peak RSS {ref['peak_rss'] / 2**20:5.0f} MiB"
                 f" | time ratio {ours['seconds'] / ref['seconds']:.2f},"
                 f" memory ratio {ours['peak_rss'] / ref['peak_rss']:.2f}")
    print(line, flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        row("Q4_1 -> GGUF Q8_0", run("ours_q8", tmp), run("ref_q8", tmp))
        row("Q4_1 -> safetensors F32", run("ours_f32", tmp), run("ref_f32", tmp))
        row("Q4_1 -> MLX 4-bit g64", run("ours_mlx4", tmp), None)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
