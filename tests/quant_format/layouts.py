"""Tiny header-valid safetensors folders in the exact names, shapes and dtypes each library
writes (AutoGPTQ/GPTQModel, AutoAWQ, bitsandbytes, compressed-tensors, fine-grained FP8,
gpt-oss MXFP4). Data is zeros except where the format layer reads it (bnb quant-state JSON,
compressed-tensors weight_shape)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

ITEMSIZE = {"I32": 4, "I16": 2, "I8": 1, "U8": 1, "F16": 2, "BF16": 2, "F32": 4, "I64": 8,
            "F8_E4M3": 1, "F8_E8M0": 1}
HIDDEN, INTER, VOCAB = 64, 128, 32
# Every linear layer of a one-layer llama, so the model layer finds nothing missing.
PROJ = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (HIDDEN // 2, HIDDEN),
        "self_attn.v_proj": (HIDDEN // 2, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
        "mlp.gate_proj": (INTER, HIDDEN), "mlp.up_proj": (INTER, HIDDEN),
        "mlp.down_proj": (HIDDEN, INTER)}  # module -> (out, in)


def config(quant: dict | None) -> dict:
    c = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
         "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB}
    if quant is not None:
        c["quantization_config"] = quant
    return c


def write(folder: Path, tensors: dict, quant: dict | None = None, with_config: bool = True,
          compact: bool = False) -> Path:
    """tensors: name -> (dtype, shape) or (dtype, shape, bytes). Returns the folder.
    `compact`: the header as the safetensors library writes it (read into columns)."""
    folder.mkdir(parents=True, exist_ok=True)
    header, blobs, off = {}, [], 0
    for name, spec in tensors.items():
        dtype, shape = spec[0], list(spec[1])
        n = math.prod(shape) * ITEMSIZE[dtype]
        data = spec[2] if len(spec) > 2 else bytes(n)
        assert len(data) == n, (name, len(data), n)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(data)
        off += n
    raw = json.dumps(header, separators=(",", ":") if compact else None).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    if with_config:
        (folder / "config.json").write_text(json.dumps(config(quant)))
    return folder


def plain() -> dict:
    """The unquantized rest of the model (embeddings, norms, lm_head)."""
    return {"model.embed_tokens.weight": ("F16", (VOCAB, HIDDEN)),
            "model.layers.0.input_layernorm.weight": ("F16", (HIDDEN,)),
            "model.layers.0.post_attention_layernorm.weight": ("F16", (HIDDEN,)),
            "model.norm.weight": ("F16", (HIDDEN,)),
            "lm_head.weight": ("F16", (VOCAB, HIDDEN))}


def gptq(bits=4, group=32, g_idx=True, version="gptq") -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        groups = math.ceil(inp / group) if group > 0 else 1
        t[p + "qweight"] = ("I32", (inp // 32 * bits, out))
        t[p + "qzeros"] = ("I32", (groups, out // 32 * bits))
        t[p + "scales"] = ("F16", (groups, out))
        if g_idx:
            t[p + "g_idx"] = ("I32", (inp,))
    q = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": False,
         "sym": True, "checkpoint_format": version}
    return t, q


def awq(group=32, version="gemm") -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        if version == "gemm":
            t[p + "qweight"] = ("I32", (inp, out // 8))
            t[p + "qzeros"] = ("I32", (inp // group, out // 8))
            t[p + "scales"] = ("F16", (inp // group, out))
        else:  # gemv: AutoAWQ calculate_zeros_width pads the groups
            mult = 1 if group >= 128 else {64: 2, 32: 4}[group]
            zw = math.ceil(math.ceil(inp // group / 8) / mult) * mult
            t[p + "qweight"] = ("I32", (out, inp // 8))
            t[p + "qzeros"] = ("I32", (out, zw))
            t[p + "scales"] = ("F16", (out, zw * 8))
    q = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
         "version": version}
    return t, q


def bnb_state(qt: str, shape, nested: bool, blocksize=64) -> bytes:
    s = {"quant_type": qt, "blocksize": blocksize, "dtype": "float16", "shape": list(shape)}
    if nested:
        s.update(nested_blocksize=256, nested_dtype="float32", nested_offset=0.05)
    return json.dumps(s).encode()


def bnb4(qt="nf4", nested=True) -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}.weight"
        n = out * inp
        t[p] = ("U8", (n // 2, 1))
        t[p + ".absmax"] = ("U8" if nested else "F32", (n // 64,))
        t[p + ".quant_map"] = ("F32", (16,))
        if nested:
            t[p + ".nested_absmax"] = ("F32", (math.ceil(n // 64 / 256),))
            t[p + ".nested_quant_map"] = ("F32", (256,))
        blob = bnb_state(qt, (out, inp), nested)
        t[p + f".quant_state.bitsandbytes__{qt}"] = ("U8", (len(blob),), blob)
    q = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
         "bnb_4bit_quant_type": qt, "bnb_4bit_use_double_quant": nested}
    return t, q


def bnb8() -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        t[p + "SCB"] = ("F32", (out,))
        t[p + "weight"] = ("I8", (out, inp))
        t[p + "weight_format"] = ("U8", ())
    return t, {"quant_method": "bitsandbytes", "load_in_8bit": True}


def ct_pack(bits=4, group=32, sym=True) -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        t[p + "weight_packed"] = ("I32", (out, math.ceil(inp * bits / 32)))
        t[p + "weight_scale"] = ("BF16", (out, inp // group))
        t[p + "weight_shape"] = ("I64", (2,), struct.pack("<2q", out, inp))
        if not sym:
            t[p + "weight_zero_point"] = ("I32", (math.ceil(out * bits / 32), inp // group))
    w = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group", "group_size": group}
    return t, _ct_config("pack-quantized", w)


def _ct_config(fmt: str, weights: dict, acts: dict | None = None) -> dict:
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": acts, "format": fmt}},
            "ignore": ["lm_head"]}


def ct_fp8(strategy="channel", block=(32, 32)) -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        t[p + "weight"] = ("F8_E4M3", (out, inp))
        shape = {"tensor": (1,), "channel": (out, 1),
                 "block": (math.ceil(out / block[0]), math.ceil(inp / block[1]))}[strategy]
        t[p + "weight_scale"] = ("BF16", shape)
    w = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy}
    if strategy == "block":
        w["block_structure"] = list(block)
    return t, _ct_config("float-quantized", w)


def ct_int8() -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        t[p + "weight"] = ("I8", (out, inp))
        t[p + "weight_scale"] = ("F32", (out, 1))
    w = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    a = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
    return t, _ct_config("int-quantized", w, a)


def ct_nvfp4() -> tuple[dict, dict]:
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        t[p + "weight_packed"] = ("U8", (out, inp // 2))
        t[p + "weight_scale"] = ("F8_E4M3", (out, inp // 16))
        t[p + "weight_global_scale"] = ("F32", (1,))
    w = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
         "group_size": 16}
    return t, _ct_config("nvfp4-pack-quantized", w)


def fp8_block(block=(128, 128), out_in=((200, 64), (64, 300))) -> tuple[dict, dict]:
    """DeepSeek-V3 style; odd sizes so edge blocks are partial."""
    t = plain()
    for i, (out, inp) in enumerate(out_in):
        p = f"model.layers.0.mlp.proj{i}."
        t[p + "weight"] = ("F8_E4M3", (out, inp))
        t[p + "weight_scale_inv"] = ("F32", (math.ceil(out / block[0]), math.ceil(inp / block[1])))
    return t, {"quant_method": "fp8", "activation_scheme": "dynamic",
               "weight_block_size": list(block)}


def mxfp4(experts=2, inter=64, hidden=64) -> tuple[dict, dict]:
    t = plain()
    p = "model.layers.0.mlp.experts."
    t[p + "gate_up_proj_blocks"] = ("U8", (experts, 2 * inter, hidden // 32, 16))
    t[p + "gate_up_proj_scales"] = ("U8", (experts, 2 * inter, hidden // 32))
    t[p + "gate_up_proj_bias"] = ("F32", (experts, 2 * inter))
    t[p + "down_proj_blocks"] = ("U8", (experts, hidden, inter // 32, 16))
    t[p + "down_proj_scales"] = ("U8", (experts, hidden, inter // 32))
    return t, {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                   "model.embed_tokens", "lm_head"]}


def offsets(folder: Path) -> dict[str, tuple[int, int]]:
    """name -> (absolute byte offset, length) as written, to check where findings point."""
    raw = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return {k: (8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
            for k, v in header.items() if k != "__metadata__"}


def ct_sparse(fmt="sparse-24-bitmask", quantized=False) -> tuple[dict, dict]:
    """compressed-tensors sparsity (older releases' sparse compressors)."""
    t = plain()
    for m, (out, inp) in PROJ.items():
        p = f"model.layers.0.{m}."
        vals = "F8_E4M3" if quantized else "BF16"
        if fmt == "sparse-24-bitmask":
            t[p + "shape"] = ("I64", (2, 1), struct.pack("<2q", out, inp))
            t[p + "compressed"] = (vals, (out, inp // 2))
        else:
            t[p + "shape"] = ("I64", (2,), struct.pack("<2q", out, inp))
            t[p + "compressed"] = (vals, (out * inp // 3,))
            t[p + "row_offsets"] = ("I64", (out,))
        t[p + "bitmask"] = ("U8", (out, math.ceil(inp / 8)))
        if quantized:
            t[p + "weight_scale"] = ("BF16", (out, 1))
    q = {"quant_method": "compressed-tensors", "format": "dense",
         "sparsity_config": {"format": fmt, "sparsity_structure": "2:4" if "24" in fmt else "unstructured"},
         "config_groups": {}, "ignore": ["lm_head"]}
    if quantized:
        q.update(_ct_config("float-quantized", {"num_bits": 8, "type": "float", "symmetric": True,
                                                "strategy": "channel"}))
        q["sparsity_config"] = {"format": fmt}
    return t, q


def format_findings(ckpt) -> list:
    """The findings of the readers, without the model layer's (a test folder has no tokenizer)."""
    from model_explorer.model.findings import MODEL_CODES

    return [f for f in ckpt.findings if f.code not in MODEL_CODES]


def format_errors(ckpt) -> list:
    return [f for f in format_findings(ckpt) if f.severity == "error"]
