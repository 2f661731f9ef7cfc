"""Hub-quantized folders of the families beyond Llama (issue #24, point 4): a tiny float model of
the family (mx.random_model), its layers quantized in the exact on-disk layout of a Hub scheme
(GPTQ, AWQ, bitsandbytes, compressed-tensors, fine-grained FP8, MXFP4), run by mx.load_model
through the existing codecs on the numpy and torch backends: logits equal to the reference, the
open groups exactly the quantized weights with no error or warning, and the trace names them.

The references, per case (`refs`, each with its tolerance x max|logit|):
- "transformers": transformers loads the same quantized folder on the CPU (its own dequantization
  or the scheme library's) and computes the logits: compressed-tensors int4 / FP8, block FP8 whose
  blocks tile every matrix, MXFP4; bitsandbytes NF4 too, bf16-close only (see its case);
- "dequantized": transformers' float model given the weights the scheme's library dequantizes the
  folder to, where transformers cannot load the folder on the CPU: GPTQ and AWQ (gptqmodel /
  autoawq and a GPU) take the layouts' s * (q - z) computed from the codes before packing, so the
  unpacking is not checked against itself; bitsandbytes its dequantize_4bit / int8 dequant;
  compressed-tensors its decompress (NVFP4: its functions in float32); DeepSeek's partial 128x128
  FP8 blocks transformers' Fp8Dequantize on the zero-padded matrix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import model_explorer as mx

from . import layouts as L

pytestmark = pytest.mark.reference
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

IDS = [1, 5, 9, 3, 7, 11, 20, 4, 4, 30, 64, 127]
KEEP_FLOAT = ("embed_tokens", "embed_in", "embed_out", "wte", "wpe", "lm_head", "norm", "ln_", "mlp.gate.",
              "moe.gate.", "router", "shared_expert_gate")
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


@dataclass
class Case:
    family: str
    config: dict
    scheme: str                           # gptq | awq | bnb | ct | fp8 | mxfp4
    quant: dict                           # config.json's quantization_config
    layer: Callable                       # (base, w) -> (tensors, dequantized w)
    refs: dict = field(default_factory=lambda: {"dequantized": 1e-4})  # reference -> tolerance
    needs: tuple = ()
    bf16: bool = False                    # the weights left unquantized stored bf16, as the model ships
    quantize: Callable = field(default=lambda name, w: w.ndim == 2 and not any(k in name for k in KEEP_FLOAT))


def _gptq(**kw):
    return lambda base, w: L.gptq_layer(base, w, **kw)


def _gptq_conv1d(base, w):
    """GPT-2's Conv1D weights are [in, out]: AutoGPTQ packs them transposed, as a Linear's [out, in]."""
    t, dq = L.gptq_layer(base, np.ascontiguousarray(w.T), bits=4, group=32)
    return t, dq.T


def _ct(fmt, args):
    return lambda base, w: L.ct_layer_real(base, w, fmt, args)


CT_INT4 = L.ct_args("pack-quantized", bits=4, strategy="group", group=32, sym=True)
CT_FP8 = L.ct_args("float-quantized", bits=8, strategy="channel", typ="float")
CT_IGNORE = ("lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$")
CT_INT4_ASYM = L.ct_args("pack-quantized", bits=4, strategy="group", group=32, sym=False)
CT_NVFP4 = L.ct_args("nvfp4-pack-quantized", bits=4, strategy="tensor_group", group=16, typ="float")
CT_MXFP4 = L.ct_args("mxfp4-pack-quantized", bits=4, strategy="group", group=32, typ="float")

# llm-compressor's mixed precision: attention FP8 per channel, the MLP int4 in groups, a format per group
CT_MIXED = {"quant_method": "compressed-tensors", "format": "mixed-precision", "quantization_status": "compressed",
            "config_groups": {
                "group_0": {"targets": ["re:.*self_attn.*"], "weights": CT_FP8, "format": "float-quantized"},
                "group_1": {"targets": ["re:.*mlp.*"], "weights": CT_INT4, "format": "pack-quantized"}},
            "ignore": ["lm_head"], "kv_cache_scheme": None}


def _ct_mixed(base, w):
    if "self_attn" in base:
        return L.ct_layer_real(base, w, "float-quantized", CT_FP8)
    return L.ct_layer_real(base, w, "pack-quantized", CT_INT4)


def _ct_nvfp4(base, w):
    """compressed-tensors' NVFP4; its decompress returns bf16 (unpack_fp4_from_uint8's default
    dtype), so the reference values are the same library functions asked for float32."""
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    t, _ = L.ct_layer_real(base, w, "nvfp4-pack-quantized", CT_NVFP4)
    packed = torch.from_numpy(t[base + ".weight_packed"])
    codes = unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2, dtype=torch.float32)
    dq = dequantize(x_q=codes, scale=torch.from_numpy(t[base + ".weight_scale"].astype(np.float32)),
                    args=QuantizationArgs(**CT_NVFP4), global_scale=torch.from_numpy(t[base + ".weight_global_scale"]),
                    dtype=torch.float32)
    return t, dq.numpy()

CASES = {
    "qwen3-gptq4-act-order": Case(
        "qwen3", {}, "gptq", L.gptq_config(4, 32, sym=False, desc_act=True),
        _gptq(bits=4, group=32, sym=False, desc_act=True)),
    "qwen2-gptq3-act-order": Case(  # 3-bit codes span the 32-bit words
        "qwen2", {}, "gptq", L.gptq_config(3, 32, sym=False, desc_act=True),
        _gptq(bits=3, group=32, sym=False, desc_act=True)),
    "gemma2-gptq4-v2": Case(
        "gemma2", dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                       attn_logit_softcapping=2.0, final_logit_softcapping=3.0, query_pre_attn_scalar=16),
        "gptq", L.gptq_config(4, 32, sym=True, desc_act=False, fmt="gptq_v2"),
        _gptq(bits=4, group=32, sym=True, desc_act=False, fmt="gptq_v2")),
    "mixtral-awq-experts": Case(
        "mixtral", dict(num_local_experts=4, num_experts_per_tok=2), "awq", L.awq_config(32),
        lambda base, w: L.awq_layer(base, w, 32)),
    "qwen3_moe-gptq8-experts": Case(
        "qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[0]),
        "gptq", L.gptq_config(8, 32, sym=True, desc_act=False), _gptq(bits=8, group=32, sym=True, desc_act=False)),
    "gpt2-gptq4-conv1d": Case(
        "gpt2", dict(n_embd=64, n_layer=2, n_head=4, n_positions=64, n_inner=96), "gptq", L.gptq_config(4, 32),
        _gptq_conv1d, quantize=lambda name, w: name.endswith(CONV1D)),
    "gpt_neox-awq-gemv": Case(
        "gpt_neox", dict(rotary_pct=0.5), "awq", L.awq_config(32, "gemv"),
        lambda base, w: L.awq_layer(base, w, 32, "gemv")),
    "phi3-bnb-nf4": Case(
        "phi3", dict(intermediate_size=128), "bnb", L.bnb_config(True, "nf4", True),
        lambda base, w: L.bnb4_layer_real(base, w, "nf4", True), needs=("bitsandbytes",),
        # bitsandbytes' CPU 4-bit matmul (gemv_4bit, AVX512-BF16) computes in bf16 whatever the
        # compute dtype: transformers' logits on the folder are bf16-close, its dequantize_4bit exact
        refs={"dequantized": 1e-4, "transformers": 5e-2}),
    "qwen3_moe-bnb-fp4-experts": Case(  # FP4 codes, absmax not nested; every expert quantized
        "qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64), "bnb",
        L.bnb_config(True, "fp4", False), lambda base, w: L.bnb4_layer_real(base, w, "fp4", False),
        needs=("bitsandbytes",)),
    "olmo2-bnb-int8": Case(
        "olmo2", {}, "bnb", L.bnb_config(False), lambda base, w: L.bnb_int8_layer_real(base, w),
        needs=("bitsandbytes",)),  # LLM.int8 quantizes the activations too: no same-floats transformers run
    "gemma3_text-ct-int4": Case(
        "gemma3_text", dict(layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                            query_pre_attn_scalar=16),
        "ct", L.ct_config("pack-quantized", CT_INT4, CT_IGNORE), _ct("pack-quantized", CT_INT4),
        refs={"transformers": 1e-4}, needs=("compressed_tensors",)),
    # transformers builds the zero point unpacked ([out, groups]) and refuses the packed [out/8, groups]
    # that compressed-tensors writes (and llm-compressor's asymmetric W4A16 checkpoints ship)
    "smollm3-ct-int4-asym": Case(
        "smollm3", dict(no_rope_layers=[1, 0]), "ct", L.ct_config("pack-quantized", CT_INT4_ASYM, CT_IGNORE),
        _ct("pack-quantized", CT_INT4_ASYM), needs=("compressed_tensors",)),
    # transformers' compressed-tensors NVFP4 / MXFP4 on the CPU stop at a float x bf16 matmul
    "granite-ct-nvfp4": Case(
        "granite", dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05,
                        logits_scaling=4.0),
        "ct", L.ct_config("nvfp4-pack-quantized", CT_NVFP4, CT_IGNORE), _ct_nvfp4, needs=("compressed_tensors",)),
    "gemma-ct-mxfp4": Case(
        "gemma", {}, "ct", L.ct_config("mxfp4-pack-quantized", CT_MXFP4, CT_IGNORE),
        _ct("mxfp4-pack-quantized", CT_MXFP4), needs=("compressed_tensors",)),
    "mistral-ct-mixed-precision": Case(
        "mistral", dict(sliding_window=4), "ct", CT_MIXED, _ct_mixed, refs={"transformers": 1e-4},
        needs=("compressed_tensors",)),
    "qwen2_moe-ct-fp8": Case(
        "qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                          shared_expert_intermediate_size=48),
        "ct", L.ct_config("float-quantized", CT_FP8, CT_IGNORE), _ct("float-quantized", CT_FP8),
        refs={"transformers": 1e-4}, needs=("compressed_tensors",)),
    "deepseek_v3-fp8-block128": Case(
        "deepseek_v3", dict(hidden_size=256, kv_lora_rank=64, q_lora_rank=160, qk_rope_head_dim=8,
                            qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                            intermediate_size=320, moe_intermediate_size=192, first_k_dense_replace=1,
                            n_shared_experts=1, n_group=1, topk_group=1),
        # transformers dequantizes FP8 on the CPU only where the blocks tile the matrix (kv_a_proj's
        # 72 rows, moe_intermediate 192 do not, as DeepSeek-V3's 576-row kv_a_proj does not): its
        # Fp8Dequantize on the zero-padded matrix gives the reference values
        "fp8", L.fp8_config((128, 128)), lambda base, w: _fp8_block(base, w, (128, 128)), bf16=True),
    "qwen3_moe-fp8-block32": Case(  # blocks that tile every matrix: transformers dequantizes the folder
        "qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
        "fp8", L.fp8_config((32, 32)), lambda base, w: _fp8_block(base, w, (32, 32)),
        refs={"transformers": 1e-4, "dequantized": 1e-4}),
    "gpt_oss-mxfp4": Case(
        "gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2,
                        layer_types=["sliding_attention", "full_attention"], sliding_window=4),
        "mxfp4", {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
        None, refs={"transformers": 1e-4}, bf16=True,
        quantize=lambda name, w: name.endswith(("experts.gate_up_proj", "experts.down_proj"))),
}


def _mxfp4(name, w):
    """gpt-oss's experts: MXFP4 blocks of the transposed ([experts, out, in]) matrices."""
    t, dq = L.mxfp4_layer(name, np.ascontiguousarray(w.transpose(0, 2, 1)))
    return t, np.ascontiguousarray(dq.transpose(0, 2, 1))


def _fp8_block(base, w, block):
    """DeepSeek-V3's block FP8 (layouts.fp8_block_layer), dequantized by transformers'
    Fp8Dequantize on the matrix padded to whole blocks, then cropped."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    t, _ = L.fp8_block_layer(base, w, block)
    q, s = t[base + ".weight"], t[base + ".weight_scale_inv"]
    padded = np.zeros((s.shape[0] * block[0], s.shape[1] * block[1]), q.dtype)
    padded[:q.shape[0], :q.shape[1]] = q
    codes = torch.from_numpy(padded.view(np.uint8)).view(torch.float8_e4m3fn)
    dq = Fp8Dequantize(None)._dequantize_one(codes, torch.from_numpy(s), output_dtype=torch.float32)
    return t, dq.numpy()[:q.shape[0], :q.shape[1]]


@dataclass
class Built:
    name: str
    case: Case
    folder: str                 # the quantized folder
    dequantized: str            # the float folder holding the reference's dequantized values
    quantized: set              # the names of the weights stored quantized


def build(name: str, case: Case, root: Path) -> Built:
    """The float model, then its quantized copy and a float folder of the dequantized values."""
    from safetensors.numpy import load_file, save_file

    src = mx.random_model({"model_type": case.family, **case.config}, root / "float", seed=5)
    state = load_file(str(Path(src) / "model.safetensors"))
    tensors, deq, quantized = {}, {}, set()
    for key, w in state.items():
        if not case.quantize(key, w):
            tensors[key] = w.astype(ml_dtypes.bfloat16) if case.bf16 else w
            deq[key] = tensors[key].astype(np.float32)
            continue
        t, dq = _mxfp4(key, w) if case.scheme == "mxfp4" else case.layer(key[:-len(".weight")], w)
        tensors.update(t)
        quantized.add(key)
        deq[key] = np.ascontiguousarray(dq, np.float32).reshape(w.shape)  # save_file writes the buffer
    cfg = json.loads((Path(src) / "config.json").read_text())
    if case.bf16:
        cfg["torch_dtype"] = "bfloat16"
    folder = L.write_folder(root / "quantized", tensors, case.quant, cfg)
    dq_folder = root / "dequantized"
    dq_folder.mkdir()
    save_file(deq, str(dq_folder / "model.safetensors"), metadata={"format": "pt"})
    (dq_folder / "config.json").write_text(json.dumps(cfg))
    return Built(name, case, str(folder), str(dq_folder), quantized)


def hf_logits(folder: str) -> np.ndarray:
    """transformers' logits on a folder, every weight loaded (none left at its random init)."""
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, device_map="cpu", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    with torch.no_grad():
        return model.eval()(torch.tensor([IDS])).logits[0].float().numpy()


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory) -> Built:
    case = CASES[request.param]
    for mod in case.needs:
        pytest.importorskip(mod)
    return build(request.param, case, tmp_path_factory.mktemp(request.param))


def test_logits_equal_the_reference(built):
    for ref_name, tol in built.case.refs.items():
        ref = hf_logits(built.folder if ref_name == "transformers" else built.dequantized)
        assert np.abs(ref).max() > 1.0  # far from uniform: the comparison means something
        for backend in ("numpy", "torch"):
            ours = mx.load_model(built.folder, device="cpu", backend=backend).forward(IDS)
            rel = float(np.abs(ours - ref).max() / np.abs(ref).max())
            print(f"{built.name} {backend}: max relative difference {rel:.2e} ({ref_name})")
            assert rel <= tol, (built.name, backend, ref_name, rel)


def test_open_groups_every_quantized_weight_without_a_false_alarm(built):
    ckpt = mx.open(built.folder)
    assert [(f.severity, f.code, f.message) for f in ckpt.findings if f.severity in ("error", "warning")] == []
    assert {k for k, t in ckpt.tensors.items() if t.quant} == built.quantized


@pytest.mark.parametrize("built", [n for n, c in CASES.items() if c.scheme != "mxfp4"], indirect=True)
def test_trace_maps_the_q_point_through_a_quantized_weight(built):
    """(gpt-oss ships its attention in bf16: only its experts are MXFP4, traced below.)"""
    rows = mx.trace(built.folder, ids=IDS).table().query("layer == 0").set_index("module")["tensor"]
    assert rows["q"] in built.quantized, rows.to_dict()


MOE = [n for n, c in CASES.items() if c.family in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss")]


@pytest.mark.parametrize("built", MOE, indirect=True)
def test_trace_lists_the_quantized_experts_behind_the_router(built):
    trace = mx.trace(built.folder, ids=IDS)
    last = trace.num_layers - 1  # a MoE layer in every case here (the first may be dense)
    assert set(trace.tensors[(last, "ffn_out")]) & built.quantized, trace.tensors[(last, "ffn_out")]
