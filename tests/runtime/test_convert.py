"""mx.convert: values survive each format within the target dtype's precision, names and the
llama.cpp Q/K layout are translated, metadata and tokenizer come along, and the demo model
generates the same greedy tokens from the converted files."""

from __future__ import annotations

import json
import os

import gguf
import ml_dtypes
import numpy as np
import pytest
from conftest import byte_symbols, gguf_name

import model_explorer as mx
from model_explorer.conversion import ConvertError, convert

HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 64, 4, 2, 2, 128
HEAD_DIM = HIDDEN // HEADS


# -- a tiny llama GGUF, written with gguf-py (no torch needed) -----------------------------------

MERGES = ["h e", "l l", "Ġ t", "Ġt he", "o r", "Ġ w", "Ġw or"]
TOKENS = byte_symbols() + ["he", "ll", "Ġt", "Ġthe", "or", "Ġw", "Ġwor", "<|endoftext|>"]
EOS = len(TOKENS) - 1
VOCAB = len(TOKENS)


def hf_to_llamacpp_rows(n_rows: int, n_head: int) -> np.ndarray:
    """Row order llama.cpp stores Q/K in: within each head, the rotary pair (j, j + d/2) of the
    Hugging Face layout becomes neighbours (2j, 2j + 1)."""
    d = n_rows // n_head
    order = []
    for h in range(n_head):
        for j in range(d // 2):
            order += [h * d + j, h * d + d // 2 + j]
    return np.array(order)


def tiny_hf_weights(seed: int = 0, tied: bool = True) -> dict[str, np.ndarray]:
    """Random weights in Hugging Face names and layout, scaled so logits are clearly peaked."""
    rng = np.random.default_rng(seed)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w = {"model.embed_tokens.weight": mat(VOCAB, HIDDEN, 1.0),
         "model.norm.weight": (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)}
    if not tied:
        w["lm_head.weight"] = mat(VOCAB, HIDDEN, 0.3)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
        w[p + "self_attn.q_proj.weight"] = mat(HEADS * HEAD_DIM, HIDDEN, 0.2)
        w[p + "self_attn.k_proj.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN, 0.2)
        w[p + "self_attn.v_proj.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN, 0.2)
        w[p + "self_attn.o_proj.weight"] = mat(HIDDEN, HEADS * HEAD_DIM, 0.2)
        w[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
        w[p + "mlp.gate_proj.weight"] = mat(FFN, HIDDEN, 0.2)
        w[p + "mlp.up_proj.weight"] = mat(FFN, HIDDEN, 0.2)
        w[p + "mlp.down_proj.weight"] = mat(HIDDEN, FFN, 0.2)
    return w


def write_tiny_gguf(path, weights: dict[str, np.ndarray], arch: str = "llama") -> str:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(TOKENS)
    w.add_token_types([1] * (VOCAB - 1) + [3])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(EOS)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for name, arr in weights.items():
        if name.endswith("q_proj.weight"):
            arr = arr[hf_to_llamacpp_rows(arr.shape[0], HEADS)]
        elif name.endswith("k_proj.weight"):
            arr = arr[hf_to_llamacpp_rows(arr.shape[0], KV_HEADS)]
        w.add_tensor(gguf_name(name), np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(HF-layout weights, path of the same model as a llama.cpp GGUF)."""
    weights = tiny_hf_weights()
    path = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", weights)
    return weights, path


@pytest.fixture(scope="module")
def tiny_f32_dir(tiny, tmp_path_factory):
    return convert(tiny[1], tmp_path_factory.mktemp("st") / "f32", format="safetensors", dtype="F32")


def load_safetensors(directory: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(os.path.join(directory, "model.safetensors"))


# -- GGUF -> safetensors -------------------------------------------------------------------------

def test_gguf_to_safetensors_f32_is_exact_with_hf_names_and_layout(tiny, tiny_f32_dir):
    weights, _ = tiny
    out = load_safetensors(tiny_f32_dir)  # the reference reader
    assert set(out) == set(weights)
    for name, arr in weights.items():
        assert out[name].dtype == np.float32
        np.testing.assert_array_equal(out[name], arr, err_msg=name)


def test_config_json_is_derived_from_gguf_hyperparameters(tiny_f32_dir):
    with open(os.path.join(tiny_f32_dir, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (HIDDEN, LAYERS, FFN)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (HEADS, KV_HEADS)
    assert config["vocab_size"] == VOCAB and config["head_dim"] == HEAD_DIM
    assert config["rms_norm_eps"] == 1e-5 and config["rope_theta"] == 10000.0
    assert config["tie_word_embeddings"] is True  # the GGUF has no output.weight
    assert config["eos_token_id"] == EOS and config["torch_dtype"] == "float32"


def test_tokenizer_json_from_gguf_vocab_and_merges(tiny_f32_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tiny_f32_dir, "tokenizer.json"))
    enc = tok.encode("hello the world<|endoftext|>")
    assert enc.tokens == ["he", "ll", "o", "Ġthe", "Ġwor", "l", "d", "<|endoftext|>"]
    assert enc.ids[-1] == EOS
    assert tok.decode(enc.ids, skip_special_tokens=True) == "hello the world"
    with open(os.path.join(tiny_f32_dir, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["eos_token"] == "<|endoftext|>" and "messages" in tc["chat_template"]


# half a unit in the last place, relative; F16 also has subnormals spaced 2**-24 apart
@pytest.mark.parametrize("dtype, np_dtype, rtol, atol", [("F16", np.float16, 2**-11, 2**-25),
                                                          ("BF16", ml_dtypes.bfloat16, 2**-8, 0)])
def test_half_precision_safetensors_round_to_nearest(tiny, tmp_path, dtype, np_dtype, rtol, atol):
    weights, path = tiny
    out_dir = convert(path, tmp_path / dtype, format="safetensors", dtype=dtype)
    with open(os.path.join(out_dir, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {dtype}
    back = mx.open(out_dir)
    for name, arr in weights.items():
        got = back.read(name)
        np.testing.assert_array_equal(got, arr.astype(np_dtype).astype(np.float32), err_msg=name)
        np.testing.assert_allclose(got, arr, rtol=rtol, atol=atol)


# -- GGUF outputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16"])
def test_gguf_quantization_equals_gguf_py(tiny, tmp_path, dtype):
    """Each 2-D tensor holds exactly gguf-py's quantize() bytes; norms stay F32."""
    weights, path = tiny
    out = convert(path, tmp_path / f"t.{dtype}.gguf", format="gguf", dtype=dtype)
    reader = gguf.GGUFReader(out)
    qtype = gguf.GGMLQuantizationType[dtype]
    stored = {t.name: t for t in reader.tensors}
    source = mx.open(path)
    assert set(stored) == set(source.tensors)
    for name in source.tensors:
        original = source.read(name)
        t = stored[name]
        if original.ndim == 1:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            continue
        assert t.tensor_type == qtype, name
        expected = gguf.quantize(original, qtype)
        np.testing.assert_array_equal(np.asarray(t.data).reshape(-1).view(np.uint8),
                                      expected.reshape(-1).view(np.uint8), err_msg=name)
        # and our reader decodes them as gguf-py does
        np.testing.assert_array_equal(mx.open(out).read(name), gguf.dequantize(expected, qtype).reshape(original.shape))


def test_gguf_to_gguf_copies_metadata_and_tokenizer(tiny, tmp_path):
    _, path = tiny
    out = convert(path, tmp_path / "q8.gguf", format="gguf", dtype="Q8_0")
    a, b = mx.open(path), mx.open(out)
    assert not b.findings
    changed = {k for k in a.metadata if k in b.metadata and _value(a, k) != _value(b, k)}
    assert changed == {"general.file_type"}
    assert _value(b, "general.file_type") == 7  # MOSTLY_Q8_0
    assert set(a.metadata) - set(b.metadata) == set()
    assert _value(b, "tokenizer.ggml.tokens") == TOKENS and _value(b, "tokenizer.ggml.merges") == MERGES


def _value(ckpt, key):
    v = ckpt.metadata[key].value
    return v.to_list() if hasattr(v, "to_list") else v


def test_hf_to_gguf_applies_the_permutation_and_derives_metadata(tiny, tiny_f32_dir, tmp_path):
    """GGUF -> safetensors -> GGUF gives back the original tensors and llama/tokenizer keys."""
    _, path = tiny
    out = convert(tiny_f32_dir, tmp_path / "back.gguf", format="gguf", dtype="F32")
    a, b = mx.open(path), mx.open(out)
    assert set(a.tensors) == set(b.tensors)
    for name in a.tensors:
        np.testing.assert_array_equal(b.read(name), a.read(name), err_msg=name)
    for key in a.metadata:
        if key.startswith(("llama.", "tokenizer.ggml.")) and key != "tokenizer.ggml.pre":
            assert _value(b, key) == pytest.approx(_value(a, key)), key
    assert _value(b, "tokenizer.chat_template") == _value(a, "tokenizer.chat_template")


@pytest.mark.parametrize("damage", ["huge_id", "vocab_not_a_map", "added_token_without_id"])
def test_hostile_tokenizer_json_is_left_out_not_trusted(tiny_f32_dir, tmp_path, damage):
    """A tokenizer.json id can not size the token list; a broken one gives a GGUF with no tokenizer."""
    import json
    import shutil

    directory = tmp_path / "hf"
    shutil.copytree(tiny_f32_dir, directory)
    tj = json.loads((directory / "tokenizer.json").read_text())
    if damage == "huge_id":
        tj["model"]["vocab"]["Ġhuge"] = 10**12
    elif damage == "vocab_not_a_map":
        tj["model"]["vocab"] = ["a", "b"]
    else:
        tj["added_tokens"] = [{"content": "<x>"}]
    (directory / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.warns(UserWarning, match="no tokenizer"):
        out = convert(directory, tmp_path / "t.gguf", format="gguf", dtype="F32")
    ckpt = mx.open(out)
    assert not ckpt.errors and "tokenizer.ggml.tokens" not in ckpt.metadata


# -- MLX -----------------------------------------------------------------------------------------

def unpack_mlx(packed: np.ndarray, bits: int) -> np.ndarray:
    """Independent unpacking: value j of a word sits at bits [j*bits, (j+1)*bits)."""
    per_word = 32 // bits
    cols = [(packed >> np.uint32(j * bits)) & np.uint32((1 << bits) - 1) for j in range(per_word)]
    return np.stack(cols, axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * per_word)


@pytest.mark.parametrize("bits, group", [(4, 64), (8, 32)])
def test_mlx_affine_quantization(tiny, tiny_f32_dir, tmp_path, bits, group):
    weights, _ = tiny
    out_dir = convert(tiny_f32_dir, tmp_path / f"mlx{bits}", format="mlx", bits=bits, group_size=group,
                      dtype="F16")
    with open(os.path.join(out_dir, "config.json")) as f:
        assert json.load(f)["quantization"] == {"group_size": group, "bits": bits}
    raw = load_safetensors(out_dir)
    ours = mx.open(out_dir)
    assert not ours.errors
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert raw[q_proj].dtype == np.uint32 and raw[q_proj].shape == (HIDDEN, HIDDEN * bits // 32)
    assert raw["model.layers.0.self_attn.q_proj.scales"].dtype == np.float16
    assert raw["model.norm.weight"].dtype == np.float16  # unquantized tensors in the float dtype
    for name, arr in weights.items():
        if arr.ndim == 1:
            continue
        base = name[: -len(".weight")]
        codes = unpack_mlx(raw[name], bits).astype(np.float32)
        scales = raw[base + ".scales"].astype(np.float32)
        biases = raw[base + ".biases"].astype(np.float32)
        rows = codes.reshape(arr.shape[0], -1, group)
        reference = (rows * scales[..., None] + biases[..., None]).reshape(arr.shape)
        np.testing.assert_allclose(ours.read(name), reference, rtol=1e-6, atol=1e-6, err_msg=name)
        # each value lands on the nearest grid point: off by at most half a step (+ fp16 rounding)
        step = np.repeat(scales, group, axis=-1)
        assert np.all(np.abs(reference - arr) <= step * 0.5 + np.abs(arr) * 2**-10 + 1e-6), name


# -- errors and progress -------------------------------------------------------------------------

def test_progress_reports_each_tensor_once(tiny, tmp_path):
    _, path = tiny
    seen = []
    convert(path, tmp_path / "p", progress=lambda done, total, name: seen.append((done, total, name)))
    n = len(mx.open(path).tensors)
    assert [d for d, _, _ in seen] == list(range(1, n + 1)) and {t for _, t, _ in seen} == {n}


def test_bad_requests_are_clear_errors(tiny, tmp_path):
    _, path = tiny
    with pytest.raises(ConvertError, match="format must be one of"):
        convert(path, tmp_path / "x", format="onnx")
    with pytest.raises(ConvertError, match="dtype for gguf"):
        convert(path, tmp_path / "x.gguf", format="gguf", dtype="Q4_K")
    with pytest.raises(ConvertError, match="bits"):
        convert(path, tmp_path / "x", format="mlx", bits=3)


def test_non_llama_gguf_is_refused_for_hf_formats_but_gguf_to_gguf_works(tmp_path):
    path = write_tiny_gguf(tmp_path / "other.gguf", tiny_hf_weights(1), arch="mamba")
    with pytest.raises(ConvertError, match="llama"):
        convert(path, tmp_path / "st", format="safetensors")
    out = convert(path, tmp_path / "other.q8.gguf", format="gguf", dtype="Q8_0")
    assert mx.open(out).dtype_mix()["Q8_0"] > 0


def test_impossible_head_count_is_a_clear_error(tiny, tmp_path):
    _, path = tiny
    with mx.open(path) as ckpt:
        ckpt.metadata["llama.attention.head_count"] = 0
        with pytest.raises(ConvertError, match="num_attention_heads = 0"):
            convert(ckpt, tmp_path / "st", format="safetensors")


def test_damaged_source_is_refused(tiny, tmp_path):
    _, path = tiny
    cut = tmp_path / "cut.gguf"
    with open(path, "rb") as f:
        cut.write_bytes(f.read()[:-100])
    with pytest.raises(ConvertError, match="error"):
        convert(str(cut), tmp_path / "st")
    assert not (tmp_path / "st" / "model.safetensors").exists()


# -- the demo model generates the same text from every conversion --------------------------------

def _greedy(path, prompt="hello the world", n=8):
    from model_explorer.runtime import load_model

    return load_model(path, device="cpu").generate(prompt, max_new_tokens=n, stop_at_eos=False).tokens


def test_tiny_model_generates_the_same_greedy_tokens_after_conversion(tiny, tiny_f32_dir, tmp_path):
    _, path = tiny
    reference = _greedy(tiny_f32_dir)
    assert _greedy(path) == reference
    for dtype in ("F16", "Q8_0"):
        assert _greedy(convert(tiny_f32_dir, tmp_path / f"t.{dtype}.gguf", format="gguf", dtype=dtype)) == reference
    assert _greedy(convert(path, tmp_path / "f16", format="safetensors", dtype="F16")) == reference
    assert _greedy(convert(tiny_f32_dir, tmp_path / "mlx8", format="mlx", bits=8, group_size=32)) == reference


@pytest.mark.slow
def test_smollm2_conversions_generate_the_same_greedy_text(tmp_path):
    """The issue's promise on the real sample: F32, F16 and Q8_0 agree exactly."""
    sample = mx.sample_path()
    f32 = convert(sample, tmp_path / "f32", format="safetensors", dtype="F32")
    reference = _greedy(f32, "The capital of France is", 12)
    assert reference == _greedy(sample, "The capital of France is", 12)  # F32 is the file, dequantized
    for dtype in ("F16", "Q8_0"):
        out = convert(f32, tmp_path / f"smol.{dtype}.gguf", format="gguf", dtype=dtype)
        assert _greedy(out, "The capital of France is", 12) == reference, dtype


# -- references: transformers reads what we write ------------------------------------------------

@pytest.fixture(scope="module")
def hf_tiny(tmp_path_factory, tiny_f32_dir):
    """A tiny random LlamaForCausalLM saved by transformers, with our tiny tokenizer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=EOS, eos_token_id=EOS)
    model = transformers.LlamaForCausalLM(config).eval()
    directory = tmp_path_factory.mktemp("hf") / "tiny-llama"
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_text(open(os.path.join(tiny_f32_dir, name)).read())
    return model, str(directory)


@pytest.mark.reference
def test_transformers_loads_our_safetensors_with_identical_weights(hf_tiny, tmp_path):
    import torch
    from transformers import LlamaForCausalLM

    model, directory = hf_tiny
    gguf_path = convert(directory, tmp_path / "tiny.gguf", format="gguf", dtype="F32")
    back = convert(gguf_path, tmp_path / "back", format="safetensors", dtype="F32")
    again = LlamaForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    ref = model.state_dict()
    for name, value in again.state_dict().items():
        assert torch.equal(value, ref[name]), name


@pytest.mark.reference
def test_transformers_runs_our_gguf_like_the_original(hf_tiny, tmp_path):
    """transformers' own GGUF loader undoes llama.cpp's Q/K permutation: same logits."""
    import torch
    from transformers import AutoModelForCausalLM

    pytest.importorskip("accelerate")  # transformers needs it to load GGUF
    model, directory = hf_tiny
    path = convert(directory, tmp_path / "tiny.gguf", format="gguf", dtype="F32")
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="tiny.gguf",
                                                  dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 200, 33, 260, 9]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)
    assert os.path.exists(path)


@pytest.mark.reference
def test_bf16_rounding_matches_torch(hf_tiny, tmp_path):
    import torch

    model, directory = hf_tiny
    out = convert(directory, tmp_path / "bf16", format="safetensors", dtype="BF16")
    from safetensors.torch import load_file

    ours = load_file(os.path.join(out, "model.safetensors"))
    for name, value in model.state_dict().items():
        assert ours[name].dtype == torch.bfloat16
        assert torch.equal(ours[name], value.to(torch.bfloat16)), name


@pytest.mark.reference
def test_smollm2_tokenizer_json_matches_transformers_gguf_tokenizer(tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    sample = mx.sample_path()
    reference = AutoTokenizer.from_pretrained(os.path.dirname(sample), gguf_file=os.path.basename(sample))
    from model_explorer.conversion import tokenizer_json_from_gguf

    ours = Tokenizer.from_str(tokenizer_json_from_gguf(mx.open(sample)))
    for text in ["The capital of France is", "digits 1234567 and  spaces\n\ttabs",
                 "<|im_start|>user\nhi<|im_end|>", "naïve café 日本語 🙂"]:
        assert ours.encode(text).ids == reference(text)["input_ids"], text


def test_mlx_quantize_in_row_chunks_equals_one_pass(monkeypatch):
    import model_explorer.conversion.writers as convert_module

    w = np.random.default_rng(5).standard_normal((10, 128)).astype(np.float32)
    whole = convert_module.mlx_quantize(w, 4, 64)
    monkeypatch.setattr(convert_module, "MLX_CHUNK_ROWS", 3)
    chunked = convert_module.mlx_quantize(w, 4, 64)
    for a, b in zip(whole, chunked):
        np.testing.assert_array_equal(a, b)


def test_mlx_source_converts_back_dequantized(tiny_f32_dir, tmp_path):
    mlx = convert(tiny_f32_dir, tmp_path / "mlx", format="mlx", bits=8, group_size=32)
    back = convert(mlx, tmp_path / "back", format="safetensors", dtype="F32")
    with open(os.path.join(back, "config.json")) as f:
        config = json.load(f)
    assert "quantization" not in config and "quantization_config" not in config
    a, b = mx.open(mlx), load_safetensors(back)
    assert set(a.tensors) == set(b)  # no .scales / .biases left
    for name in b:
        np.testing.assert_array_equal(b[name], a.read(name), err_msg=name)


@pytest.mark.reference
def test_pytorch_bin_source_converts(tiny, tiny_f32_dir, tmp_path):
    torch = pytest.importorskip("torch")
    weights, _ = tiny
    folder = tmp_path / "pt"
    folder.mkdir()
    torch.save({k: torch.from_numpy(v) for k, v in weights.items()}, folder / "pytorch_model.bin")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text(open(os.path.join(tiny_f32_dir, name)).read())
    out = convert(str(folder), tmp_path / "pt.gguf", format="gguf", dtype="F32")
    back = load_safetensors(convert(out, tmp_path / "st", format="safetensors"))
    for name, arr in weights.items():
        np.testing.assert_array_equal(back[name], arr, err_msg=name)


def test_a_failure_midway_leaves_no_partial_file(tiny, tmp_path, monkeypatch):
    _, path = tiny
    ckpt = mx.open(path)
    calls = []

    def failing_read(name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 3:
            raise OSError("disk went away")
        return type(ckpt).read(ckpt, name, *args, **kwargs)

    monkeypatch.setattr(ckpt, "read", failing_read)
    for fmt, dest in (("safetensors", tmp_path / "st"), ("gguf", tmp_path / "x.gguf")):
        calls.clear()
        with pytest.raises(OSError, match="disk went away"):
            convert(ckpt, dest, format=fmt)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
