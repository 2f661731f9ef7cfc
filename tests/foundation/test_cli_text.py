"""Text for people has no Python reprs (issue 30, item 7): every line the CLI prints, every label
the Explorer sends to the browser and every string an offline report embeds, over a corpus of
checkpoints, holds no dict, list or tuple repr ({'k': ..., ['a', ...], ('a', ...)), no list of
dicts, and no None, True or False standing as a word. The quantization mix reads as the Overview
writes it (formats/hubquant/summary.quantization_text), in `info` and the model card alike.

The corpus, built here: a GGUF of mixed quantization (Q8_0, Q4_0 and F32 tensors; string, float
and bool metadata), a safetensors folder with its config.json and a shard index, a PyTorch
pickle, a PEFT adapter in the layout peft saves, a GPTQ folder, a truncated safetensors file and a pickle
that runs code; and the real checkpoints that packages install (tests/realfiles.py; skipped
when absent): the SmolLM2 sample GGUF, all-MiniLM-L6-v2 (safetensors, sentence-transformers'
layout), Gemma 3 270M Q4_K_M (llama.cpp's mix of Q4_K, Q5_0, Q6_K and Q8_0, the issue's
example), and Silero VAD's TorchScript archive and safetensors.

What is exempt, because it is the file's own text: the strings the file stores (a chat
template holds Jinja code such as messages[0]['role']), the hexdump's bytes and the JSON
header they spell, and a pickle's disassembly (its opcodes and the calls it would make are
Python's own notation: BINUNICODE ('name'), _rebuild_tensor_v2(..., False)). Shapes read as
[4096, 4096] (the Explorer's notation), a keyword in prose as weights_only=False, a call as
posix.system('echo').
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import pickle
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from realfiles import gemma3_gguf, minilm_folder, silero_folder, smollm2_gguf

import model_explorer as mx
from model_explorer.cli import main
from model_explorer.formats.hubquant.summary import quantization_text
from model_explorer.units import names_text, plain_text

# A dict, a list or tuple of strings, a list of dicts, None/True/False as words (not keyword=False).
REPR = re.compile(r"\{'|\['|(?<![\w.\]])\('|\[\{|(?<![=\w])\b(?:None|True|False)\b")
COMMANDS = (["info"], ["doctor"], ["hexdump", "--length", "96"])
# scan and diff decode every tensor: over the built files only (the real ones take seconds each)
REAL = ("smollm2", "minilm", "gemma3", "silero_jit", "silero_st")


def run_cli(argv: list[str]) -> tuple[int, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    return rc, (out.getvalue() + err.getvalue()).splitlines()


def file_strings(path: str) -> list[str]:
    """The strings the checkpoint stores (metadata values), as the views may show them."""
    with mx.open(path) as ckpt:
        values = [getattr(v, "value", v) for v in ckpt.metadata.values()]
    found = []
    for v in values:
        items = v if isinstance(v, dict) else {"": v}
        found += [x for x in items.values() if isinstance(x, str) and len(x) >= 8]
    return found


def hits(lines, own: list[str] = ()) -> list[str]:
    """Lines that read as a Python repr, the file's own strings left out."""
    return [line for line in lines if REPR.search(line) and not any(s[:40] in line for s in own)
            and not any(plain_text(s, 60)[:40] in line for s in own)]


# -- the corpus ----------------------------------------------------------------------------------

def _mixed_gguf(path: Path) -> str:
    """A tiny Llama GGUF: attention Q8_0, MLP Q4_0, norms F32; string, float and bool metadata."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from model.conftest import gguf_name, tiny_cfg, tiny_state

    cfg = tiny_cfg(vocab_size=64)
    w = gguf.GGUFWriter(str(path), "llama")
    sizes = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size", "head_count": "num_attention_heads",
             "feed_forward_length": "intermediate_size", "head_count_kv": "num_key_value_heads",
             "context_length": "max_position_embeddings"}
    for key, hf in sizes.items():
        getattr(w, f"add_{key}")(cfg[hf])
    for key, value in (("name", "mixed tiny"), ("layer_norm_rms_eps", 1e-5), ("tokenizer_model", "gpt2"),
                       ("file_type", gguf.LlamaFileType.MOSTLY_Q8_0), ("token_list", [f"t{i}" for i in range(64)]),
                       ("token_scores", [float(i) for i in range(64)]), ("add_bos_token", True),
                       ("add_eos_token", False)):
        getattr(w, f"add_{key}")(value)
    w.add_array("general.languages", ["en", "fr"])
    for name, data in tiny_state(cfg).items():
        kind = Q.F32 if data.ndim == 1 else Q.Q4_0 if ".mlp." in name else Q.Q8_0
        w.add_tensor(gguf_name(name), data if kind == Q.F32 else gguf.quants.quantize(data, kind),
                     raw_dtype=None if kind == Q.F32 else kind)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return str(path)


def _sharded(folder: str, dest: Path) -> str:
    from safetensors.numpy import load_file, save_file

    state = load_file(f"{folder}/model.safetensors")
    dest.mkdir()
    names = sorted(state)
    weight_map = {}
    for i, chunk in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: state[k] for k in chunk}, str(dest / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(chunk, shard))
    size = sum(v.nbytes for v in state.values())
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": size},
                                                                   "weight_map": weight_map}))
    shutil.copy(f"{folder}/config.json", dest / "config.json")
    return str(dest)


def _adapter(dest: Path) -> str:
    """A LoRA adapter as peft's save_pretrained writes it (adapter_config.json and its tensors
    under base_model.model.*); peft's own files are read in tests/model/test_adapters.py."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    dest.mkdir()
    tensors = {}
    for i in range(2):
        for proj, out in (("q_proj", 64), ("v_proj", 32)):
            stem = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{stem}.lora_A.weight"] = rng.standard_normal((4, 64)).astype(np.float32)
            tensors[f"{stem}.lora_B.weight"] = rng.standard_normal((out, 4)).astype(np.float32)
    save_file(tensors, str(dest / "adapter_model.safetensors"), metadata={"format": "pt"})
    (dest / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False,
        "base_model_name_or_path": None, "rank_pattern": {}, "alpha_pattern": {}}))
    return str(dest)


def _gptq(folder: str, dest: Path) -> str:
    from quant_codec import layouts as L
    from safetensors.numpy import load_file

    tensors = {}
    for name, w in load_file(f"{folder}/model.safetensors").items():
        if name.endswith("_proj.weight"):
            tensors.update(L.gptq_layer(name[:-len(".weight")], w, 4, 32, sym=True, desc_act=False)[0])
        else:
            tensors[name] = w
    cfg = json.loads(Path(folder, "config.json").read_text())
    return str(L.write_folder(dest, tensors, L.gptq_config(4, 32, True, False), {**cfg, "torch_dtype": "float32"}))


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo never",))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("text")
    folder = mx.random_model({"model_type": "llama", "num_hidden_layers": 2}, root / "folder")
    files = {"mixed_gguf": _mixed_gguf(root / "mixed.gguf"), "folder": folder,
             "sharded": _sharded(folder, root / "sharded"), "gptq": _gptq(folder, root / "gptq")}
    blob = Path(folder, "model.safetensors").read_bytes()
    (root / "cut.safetensors").write_bytes(blob[: len(blob) // 2])
    (root / "evil.pkl").write_bytes(pickle.dumps({"x": _Evil()}))
    files.update(truncated=str(root / "cut.safetensors"), hostile=str(root / "evil.pkl"))
    if importlib.util.find_spec("torch"):
        import torch
        from safetensors.numpy import load_file

        torch.save({k: torch.from_numpy(v) for k, v in load_file(f"{folder}/model.safetensors").items()},
                   root / "model.pt")
        files["pickle"] = str(root / "model.pt")
    files["adapter"] = _adapter(root / "adapter")
    silero = silero_folder()
    real = {"smollm2": smollm2_gguf(), "minilm": minilm_folder(), "gemma3": gemma3_gguf(root),
            "silero_jit": silero and silero / "silero_vad.jit", "silero_st": silero and silero / "silero_vad_16k.safetensors"}
    files.update({name: str(path) for name, path in real.items() if path is not None and path.exists()})
    return files


# -- the command line ----------------------------------------------------------------------------

def test_the_text_helpers_write_words():
    assert plain_text({"a": [1, 2], "b": None, "c": True}) == "3 keys: a = (2 items), b = not set, c = yes"
    assert plain_text(["en", "fr"]) == '2 items: "en", "fr"' and plain_text(np.arange(8), items=6) == \
        "8 items: 0, 1, 2, 3, 4, 5, …"
    assert plain_text(np.bool_(False)) == "no" and plain_text("two\nlines") == "two\\nlines"
    assert names_text(["a", "b", "c"]) == "a, b and c" and names_text(list("abcdefg"), 2) == "a, b and 5 more"
    assert quantization_text({"label": "MOSTLY_Q4_1", "text": "5.74 bits per weight: Q4_1 79%"}) == \
        "MOSTLY_Q4_1: 5.74 bits per weight: Q4_1 79%"
    assert quantization_text(None) is None and quantization_text({"scheme": "gguf"}) is None


def test_no_cli_line_reads_as_a_python_repr(corpus):
    found = {}
    for name, path in corpus.items():
        own = file_strings(path) if name not in ("hostile", "truncated") else []
        for command in COMMANDS:
            rc, lines = run_cli([command[0], path, *command[1:]])
            assert rc in (0, 1), (name, command, lines[-3:])
            bad = hits(lines, own)
            if bad:
                found[f"{command[0]} {name}"] = bad[:3]
        for argv in ([] if name in REAL else [["scan", path, "--max-rows", "4"], ["diff", path, corpus["folder"]]]):
            rc, lines = run_cli(argv)
            if hits(lines):
                found[f"{argv[0]} {name}"] = hits(lines)[:3]
        if name not in ("minilm", "gemma3", "adapter"):  # their repair plan asks transformers (slow)
            rc, lines = run_cli(["repair", path, str(Path(path).parent / f"repaired-{name}"), "--dry-run"])
            if hits(lines):
                found[f"repair {name}"] = hits(lines)[:3]
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)


def test_repairs_and_generation_speak_in_words(corpus, tmp_path):
    rc, lines = run_cli(["repair", corpus["truncated"], str(tmp_path / "fixed")])
    assert rc == 0 and any("truncated tensor(s) dropped (model.layers." in line for line in lines), lines
    assert not hits(lines)
    if "smollm2" in corpus:
        rc, lines = run_cli(["generate", corpus["smollm2"], "--prompt", "Hi", "--max-new-tokens", "1",
                             "--device", "cpu"])
        assert rc == 0 and not hits(lines), lines


def test_info_writes_metadata_and_the_quantization_mix_as_the_overview_does(corpus):
    from model_explorer.widgets._overview import overview

    rc, lines = run_cli(["info", corpus["mixed_gguf"], "--max-keys", "60"])
    assert rc == 0
    assert "  general.languages: 2 items: \"en\", \"fr\"" in lines
    assert "  tokenizer.ggml.scores: 64 items: 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, …" in lines
    assert "  tokenizer.ggml.add_bos_token: yes" in lines and "  tokenizer.ggml.add_eos_token: no" in lines
    for name in ("mixed_gguf", "gemma3", "smollm2", "gptq"):
        if name not in corpus:
            continue
        rc, lines = run_cli(["info", corpus[name]])
        with mx.open(corpus[name]) as ckpt:
            facts = {row[0]: row[1] for row in overview(ckpt)["facts"]}
        assert f"quantization: {facts['quantization']}" in lines, (name, facts["quantization"], lines[:6])
        if name == "gemma3":  # the file: its mix in words, Q5_0 among them
            assert facts["quantization"].startswith("MOSTLY_Q4_K_M: ") and "Q5_0 " in facts["quantization"]
            assert "  tied embeddings        yes" in "\n".join(lines)


# -- the widgets and the offline report ----------------------------------------------------------

SKIPPED = {"b64", "bytes", "floats", "hist", "strings", "sample"}  # packed bytes and tensor names


def strings(value, path=()):
    """(path, text) of every string in a JSON-like value, packed bytes and names left out."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in SKIPPED:
                yield from strings(v, (*path, str(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from strings(v, (*path, str(i)))
    elif isinstance(value, str):
        yield ".".join(path), value


def disassembly(where: str, text: str) -> bool:
    """A pickle's opcodes and calls, rendered in its own (Python's) notation."""
    return text.startswith(("Pickle opcode", "ok ", "GLOBAL")) or where.startswith(("tree.", "pages.", "steps."))


def test_no_widget_label_or_report_string_reads_as_a_python_repr(corpus):
    from model_explorer.widgets._report import report_data
    from model_explorer.widgets._static import summary_text

    found = {}
    for name, path in corpus.items():
        if name == "minilm":  # its repair plan (the report's Fix buttons) asks transformers: slow
            continue
        own = file_strings(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = mx.explore(path)
            data = report_data(ex)
        pickled = ex.checkpoint.format in ("pytorch", "pickle")
        texts = list(strings(data)) + list(strings({"model_findings": ex.model_findings,
                                                    "layer_findings": ex.layer_findings}))
        texts += [("summary_text", line) for line in summary_text(ex.checkpoint).splitlines()]
        bad = [(w, t[:160]) for w, t in texts if hits([t], own) and not (pickled and disassembly(w, t))]
        if bad:
            found[name] = bad[:4]
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)


def test_the_explorers_overview_and_card_rows_are_words(corpus):
    from model_explorer.model.card import card

    with mx.open(corpus["mixed_gguf"]) as ckpt:
        c = card(ckpt)
    assert "quantization: MOSTLY_Q8_0: " in c.text() and "kinds=" not in c.text()
    from model_explorer.widgets._overview import overview

    with mx.open(corpus["mixed_gguf"]) as ckpt:
        meta = dict(overview(ckpt)["metadata"])
    assert meta["general.languages"] == '2 items: "en", "fr"'
    assert meta["tokenizer.ggml.add_bos_token"] == "yes"
