"""Checkpoints load_model cannot run are refused with a message that names what is missing;
MLX-quantized folders load and match transformers on the same (dequantized) weights."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import (
    hf_model_from,
    random_state,
    reference_logits,
    rel_error,
    tiny_config,
    write_gguf,
    write_hf_dir,
)

from model_explorer.runtime import UnsupportedModel, load_model
from model_explorer.runtime.engines import get_backend, torch_installed


def test_unsupported_gguf_architecture_is_named(tmp_path):
    cfg = tiny_config()
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "g.gguf"), architecture="mamba")
    with pytest.raises(UnsupportedModel, match=r"'mamba' is not supported.*llama, mistral, qwen2"):
        load_model(path, device="cpu")


def test_missing_gguf_tensor_is_named(tmp_path):
    cfg = tiny_config()
    state = random_state(cfg)
    del state["model.layers.1.mlp.up_proj.weight"]
    path = write_gguf(cfg, state, str(tmp_path / "g.gguf"))
    # the model layer's missing-tensor finding names it (the same one doctor prints)
    with pytest.raises(UnsupportedModel, match=r"not in the checkpoint: 'blk\.1\.ffn_up\.weight'"):
        load_model(path, device="cpu")


def _folder(tmp_path, **config_changes) -> str:
    cfg = tiny_config()
    folder = write_hf_dir(str(tmp_path / "m"), cfg, random_state(cfg))
    cfg.update(config_changes)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return folder


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, r"model_type 'bert' \(BertForMaskedLM\)"),
    ({"num_attention_heads": None}, r"no 'num_attention_heads'"),
    ({"hidden_act": "gelu"}, r"hidden_act 'gelu'"),
    ({"num_key_value_heads": 3}, r"not a multiple of num_kv_heads"),
    ({"intermediate_size": 100}, r"intermediate_size = 100, but 'model\.layers\.0\.mlp\.up_proj\.weight' has 96 rows"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, r"rope scaling 'longrope' is not implemented"),
    ({"num_hidden_layers": 10**12}, r"num_hidden_layers = 1000000000000, but the tensors name layers 0 to 1"),
    ({"rms_norm_eps": "tiny"}, r"rms_norm_eps should be a finite number, found 'tiny'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, r"llama3 rope scaling needs a positive low_freq"),
    ({"model_type": "mistral", "sliding_window": "wide"}, r"sliding_window must be a positive integer"),
    ({"num_attention_heads": "4", "head_dim": None}, r"num_heads must be a positive integer, found '4'"),
    ({"rope_parameters": 5}, r"rope_parameters should be an object, found 5"),
])
def test_bad_config_is_explained(tmp_path, change, message):
    with pytest.raises(UnsupportedModel, match=message):
        load_model(_folder(tmp_path, **change), device="cpu")


def test_missing_tokenizer_is_named(tmp_path):
    # A folder without a tokenizer is still a model: it loads, and text is what needs one.
    folder = _folder(tmp_path)
    os.remove(os.path.join(folder, "tokenizer.json"))
    model = load_model(folder, device="cpu")
    with pytest.raises(UnsupportedModel, match="no tokenizer.json.*Add tokenizer.json"):
        model.generate("hello", max_new_tokens=1)


def test_untied_model_without_lm_head_is_refused(tmp_path):
    cfg = tiny_config()
    state = random_state(cfg)
    del state["lm_head.weight"]
    folder = write_hf_dir(str(tmp_path / "m"), cfg, state)
    with pytest.raises(UnsupportedModel, match="no 'lm_head.weight'"):
        load_model(folder, device="cpu")


def test_chat_without_template_is_a_clear_error(tmp_path):
    folder = _folder(tmp_path)
    os.remove(os.path.join(folder, "tokenizer_config.json"))
    model = load_model(folder, device="cpu")
    with pytest.raises(ValueError, match="no chat template"):
        model.generate("hi", chat=True)
    assert model.generate("hi", max_new_tokens=2, stop_at_eos=False).tokens


def test_missing_source_and_bad_device(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_model(str(tmp_path / "nothing.gguf"), device="cpu")
    with pytest.raises(ValueError, match="device must be one of"):
        get_backend("tpu")
    with pytest.raises(ValueError, match="numpy backend runs on the CPU only"):
        get_backend("cuda", "numpy")


def test_unavailable_gpu_is_explained():
    from model_explorer.runtime import available_devices

    if "cuda" in available_devices():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="torch is installed but sees no 'cuda'" if torch_installed()
                       else "needs torch"):
        get_backend("cuda")


# -- MLX ----------------------------------------------------------------------------------------------

def mlx_quantize(w: np.ndarray, bits: int, group: int):
    """MLX affine quantization: per group, w ~ scale * q + bias, q packed little-end-first in uint32."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    lo, hi = g.min(-1), g.max(-1)
    levels = 2**bits - 1
    scale = np.where(hi > lo, (hi - lo) / levels, 1.0).astype(np.float32)
    q = np.clip(np.round((g - lo[..., None]) / scale[..., None]), 0, levels).astype(np.uint32)
    per_word = 32 // bits
    q = q.reshape(rows, cols // per_word, per_word)
    packed = np.zeros((rows, cols // per_word), np.uint32)
    for j in range(per_word):
        packed |= q[..., j] << np.uint32(bits * j)
    deq = (scale[..., None] * q.reshape(rows, cols // group, group) + lo[..., None]).reshape(rows, cols)
    return packed, scale, lo.astype(np.float32), deq.astype(np.float32)


@pytest.mark.reference
@pytest.mark.parametrize("bits", [4, 8])
def test_mlx_folder_matches_transformers_on_the_dequantized_weights(tmp_path, bits):
    cfg = tiny_config("llama", tie=True)
    state = random_state(cfg, seed=11)
    stored, rounded = {}, {}
    for name, w in state.items():
        if w.ndim == 2:
            base = name[: -len(".weight")]
            packed, scales, biases, deq = mlx_quantize(w, bits, 32)
            stored.update({name: packed, base + ".scales": scales.astype(np.float16),
                           base + ".biases": biases.astype(np.float16)})
            # what the file really holds: scales and biases rounded to float16
            q = ((deq - biases.repeat(32, axis=1)) / np.where(scales == 0, 1, scales).repeat(32, axis=1))
            rounded[name] = (scales.astype(np.float16).astype(np.float32).repeat(32, axis=1) * np.round(q)
                             + biases.astype(np.float16).astype(np.float32).repeat(32, axis=1))
        else:
            stored[name] = rounded[name] = w
    folder = write_hf_dir(str(tmp_path / "mlx"), dict(cfg, quantization={"group_size": 32, "bits": bits}),
                          stored)
    model = load_model(folder, device="cpu")
    assert model.dequant.by_dtype().keys() == {f"MLX_Q{bits}", "F32"}
    ids = [1, 40, 41, 42, 100, 7, 250]
    ref = reference_logits(hf_model_from(cfg, rounded), ids)
    assert rel_error(model.forward(ids), ref) < 1e-4


# -- hostile files -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory) -> bytes:
    cfg = tiny_config(num_hidden_layers=1, vocab_size=272)
    path = write_gguf(cfg, random_state(cfg), str(tmp_path_factory.mktemp("fuzz") / "f.gguf"))
    with open(path, "rb") as f:
        return f.read()


def test_mutated_gguf_headers_load_or_raise_a_clear_error(small_gguf, tmp_path):
    """Random byte changes in the header: load_model either works or raises UnsupportedModel."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    header_end = small_gguf.index(b"output.weight") + 100
    path = tmp_path / "m.gguf"

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(st.tuples(st.integers(0, header_end), st.integers(0, 255)), min_size=1, max_size=4))
    def check(edits):
        data = bytearray(small_gguf)
        for pos, value in edits:
            data[pos] = value
        path.write_bytes(bytes(data))
        try:
            model = load_model(str(path), device="cpu")
        except UnsupportedModel:
            return
        model.forward([1, 2, 3])

    check()
