"""The first open of a Hugging Face folder, as a new user meets it (issue 27): no torch at open.

1. Fresh process: `import model_explorer; mx.open(folder)` for a tiny Llama folder, a GPTQ
   folder and a gpt-oss MXFP4 folder, with transformers and torch installed. Target <= 0.3 s.
   Beside it, from the same run: the same with `cross_check=True` (transformers' meta-device
   build, what every open did before), and the reference `import safetensors;
   safe_open(...).keys()` in a fresh process (the floor any Python reader pays).
2. In JupyterLab + Chromium, a fresh kernel: one cell `import model_explorer as mx;
   mx.explore(folder)` from run to the first coloured bytes drawn. Target <= 0.5 s. Beside it
   the same cell on the bundled GGUF sample (which never needed torch).

    .venv/bin/python benchmarks/bench_first_open.py [--no-browser] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "browser"))

TARGET_OPEN = 0.3
TARGET_PAINT = 0.5


def write_folders(tmp: Path) -> dict[str, Path]:
    """A tiny Llama, a GPTQ 4-bit Llama and a gpt-oss MXFP4 folder, each with config.json."""
    from quant_codec.layouts import mxfp4_layer
    from quant_format import layouts as L
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    h, f, layers, vocab, experts = 64, 128, 4, 256, 4
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=vocab, hidden_size=h,
               intermediate_size=f, num_hidden_layers=layers, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    llama = tmp / "llama"
    llama.mkdir()
    state = {"model.embed_tokens.weight": rng.standard_normal((vocab, h), np.float32),
             "model.norm.weight": np.ones(h, np.float32),
             "lm_head.weight": rng.standard_normal((vocab, h), np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (64, h)), ("self_attn.k_proj", (32, h)),
                            ("self_attn.v_proj", (32, h)), ("self_attn.o_proj", (h, 64)),
                            ("mlp.gate_proj", (f, h)), ("mlp.up_proj", (f, h)), ("mlp.down_proj", (h, f))):
            state[p + name + ".weight"] = rng.standard_normal(shape, np.float32)
        state[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        state[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    save_file(state, str(llama / "model.safetensors"))
    (llama / "config.json").write_text(json.dumps(cfg))

    tensors, quant = L.gptq(4)
    gptq = L.write(tmp / "gptq", tensors, quant)

    oss = tmp / "gpt_oss"
    oss.mkdir()
    ocfg = dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], vocab_size=vocab, hidden_size=h,
                intermediate_size=h, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, num_local_experts=experts, num_experts_per_tok=2, sliding_window=8,
                layer_types=["sliding_attention", "full_attention"] * (layers // 2),
                quantization_config={"quant_method": "mxfp4"})
    out = {"model.embed_tokens.weight": rng.standard_normal((vocab, h), np.float32),
           "model.norm.weight": np.ones(h, np.float32), "lm_head.weight": rng.standard_normal((vocab, h), np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (64, h)), ("self_attn.k_proj", (32, h)),
                            ("self_attn.v_proj", (32, h)), ("self_attn.o_proj", (h, 64))):
            out[p + name + ".weight"] = rng.standard_normal(shape, np.float32)
            out[p + name + ".bias"] = np.zeros(shape[0], np.float32)
        out[p + "self_attn.sinks"] = np.zeros(4, np.float32)
        out[p + "mlp.router.weight"] = rng.standard_normal((experts, h), np.float32)
        out[p + "mlp.router.bias"] = np.zeros(experts, np.float32)
        out.update(mxfp4_layer(p + "mlp.experts.gate_up_proj", rng.standard_normal((experts, 2 * h, h), np.float32))[0])
        out.update(mxfp4_layer(p + "mlp.experts.down_proj", rng.standard_normal((experts, h, h), np.float32))[0])
        out[p + "mlp.experts.gate_up_proj_bias"] = np.zeros((experts, 2 * h), np.float32)
        out[p + "mlp.experts.down_proj_bias"] = np.zeros((experts, h), np.float32)
        out[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    save_file(out, str(oss / "model.safetensors"))
    (oss / "config.json").write_text(json.dumps(ocfg))
    return {"llama": llama, "gptq": Path(gptq), "gpt_oss": oss}


def fresh(code: str) -> float:
    """Seconds a fresh Python process takes to run `code` (its own clock, from before imports)."""
    run = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter()\n" + code +
                          "\nprint(time.perf_counter() - t)"], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return float(run.stdout.strip().splitlines()[-1])


def bench_processes(folders: dict[str, Path], repeat: int, cross_column: bool = True) -> bool:
    ok = True
    print(f"\nfresh process, import + open (median of {repeat}); target <= {TARGET_OPEN} s")
    print(f"{'folder':10} {'mx.open':>9} {'+cross-check':>13} {'safe_open':>10} {'findings':>9}")
    for name, d in folders.items():
        files = sorted(str(p) for p in d.glob("*.safetensors"))
        ours = statistics.median(fresh(f"import model_explorer as mx; c = mx.open({str(d)!r})")
                                 for _ in range(repeat))
        cross = statistics.median(fresh(f"import model_explorer as mx; c = mx.open({str(d)!r}, cross_check=True)")
                                  for _ in range(max(1, repeat // 2))) if cross_column else float("nan")
        ref = statistics.median(fresh("from safetensors import safe_open\n"
                                      f"for p in {files!r}:\n    f = safe_open(p, 'np'); list(f.keys())")
                                for _ in range(repeat))
        import model_explorer as mx

        found = [f for f in mx.open(d, cross_check=True).findings if f.severity != "info"]
        ok &= ours <= TARGET_OPEN and not found
        cross_text = f"{cross:12.3f}s" if cross == cross else f"{'not run':>13}"
        print(f"{name:10} {ours:8.3f}s {cross_text} {ref:9.3f}s {len(found):>9}")
    return ok


def bench_browser(folders: dict[str, Path]) -> bool:
    from labserver import CHROMIUM, CHROMIUM_ARGS, jupyter_lab, open_notebook
    from playwright.sync_api import sync_playwright

    import model_explorer as mx

    # The first Explorer of a JupyterLab session also loads the widget's JavaScript, whatever it
    # opens: it is timed apart ("llama, 1st"), then every case runs in a fresh kernel of its own.
    cases = {"llama, 1st": folders["llama"], "gptq": folders["gptq"], "gpt_oss": folders["gpt_oss"],
             "llama": folders["llama"]}
    try:
        cases["gguf sample"] = Path(mx.sample_path())
    except Exception:  # noqa: BLE001 - the sample package is optional
        pass
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-open-"))
    results = {}
    try:
        with jupyter_lab(tmp / "lab") as (url, home), sync_playwright() as p:
            import nbformat

            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for label, path in cases.items():
                name = f"first-{label.replace(' ', '_').replace(',', '')}.ipynb"
                cell = f"import model_explorer as mx\nmx.explore({str(path)!r})"
                nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
                nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
                nbformat.write(nb, home / name)
                page = open_notebook(browser, url, name)  # a fresh kernel for each notebook
                page.wait_for_timeout(300)
                t = time.perf_counter()
                page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
                page.locator(".me-explorer .me-b").first.wait_for(timeout=60_000)
                results[label] = time.perf_counter() - t
                page.close()
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nJupyterLab, fresh kernel: run `import model_explorer as mx; mx.explore(...)` -> first "
          f"bytes drawn; target <= {TARGET_PAINT} s")
    for label, s in results.items():
        print(f"  {label:12} {s:6.3f} s")
    return all(s <= TARGET_PAINT for k, s in results.items() if k != "gguf sample")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-browser", action="store_true", help="fresh-process figures only")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-cross-column", action="store_true",
                        help="skip the fresh processes that time cross_check=True (8 s each): the smoke run")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-open-"))
    try:
        folders = write_folders(tmp)
        ok = bench_processes(folders, args.repeat, not args.no_cross_column)
        if not args.no_browser:
            ok &= bench_browser(folders)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nall targets met" if ok else "\na target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
