"""Checkpoints of real sizes with random weights, written without needing their memory: one
tensor in memory at a time (the real-size benchmarks and the course's bounded-memory lesson).

- `write_gguf(path, shape, mix="q4_k_m")`: a llama GGUF with llama.cpp's Q4_K_M mix (Q4_K for most
  matrices, Q6_K for the output head and for attn_v / ffn_down on the layers llama.cpp gives more
  bits), or "q4_k" (every matrix Q4_K). Blocks are random bytes with small, finite fp16 scales:
  every bit pattern of a K-quant block's codes and 6-bit scales is valid.
- `write_bf16_folder(path, shape)`: config.json + sharded bf16 safetensors with an index, the
  layout transformers writes (the safetensors header is written first, then the data).
- `write_gptq_folder(path, shape, bits=4, group_size=128)`: the layout AutoGPTQ / GPTQModel /
  optimum write (qweight, qzeros, scales, g_idx per layer matrix; embedding, norms, head in fp16).

Shapes: LLAMA_8B (Llama 3 8B), LLAMA_70B (Llama 3 70B), TINY (for the small modes and tests);
`Shape(...)` for any other.
Needs gguf-py (`gguf`) for the GGUF writer.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    context: int = 8192
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def matrices(self, i: int) -> list[tuple[str, str, tuple[int, int]]]:
        """(GGUF name, Hugging Face name, (rows, cols)) of layer i's matrices."""
        h, f, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        hf = f"model.layers.{i}."
        return [(f"blk.{i}.attn_q.weight", hf + "self_attn.q_proj.weight", (h, h)),
                (f"blk.{i}.attn_k.weight", hf + "self_attn.k_proj.weight", (kv, h)),
                (f"blk.{i}.attn_v.weight", hf + "self_attn.v_proj.weight", (kv, h)),
                (f"blk.{i}.attn_output.weight", hf + "self_attn.o_proj.weight", (h, h)),
                (f"blk.{i}.ffn_gate.weight", hf + "mlp.gate_proj.weight", (f, h)),
                (f"blk.{i}.ffn_up.weight", hf + "mlp.up_proj.weight", (f, h)),
                (f"blk.{i}.ffn_down.weight", hf + "mlp.down_proj.weight", (h, f))]

    def norms(self, i: int) -> list[tuple[str, str]]:
        return [(f"blk.{i}.attn_norm.weight", f"model.layers.{i}.input_layernorm.weight"),
                (f"blk.{i}.ffn_norm.weight", f"model.layers.{i}.post_attention_layernorm.weight")]

    @property
    def parameters(self) -> int:
        per_layer = sum(r * c for _, _, (r, c) in self.matrices(0)) + 2 * self.hidden
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden


LLAMA_8B = Shape(4096, 14336, 32, 32, 8, 128256)
LLAMA_70B = Shape(8192, 28672, 80, 64, 8, 128256)
TINY = Shape(256, 768, 2, 8, 2, 4096, context=512)

QK_K = 256
BLOCK_BYTES = {"Q4_K": 144, "Q6_K": 210}


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _kquant_blocks(rng, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Random K-quant blocks for a (rows, cols) matrix, as (rows, bytes per row) uint8."""
    blocks = rows * (cols // QK_K)
    raw = rng.integers(0, 256, size=(blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    scale = np.frombuffer(np.float16(2e-4).tobytes(), dtype=np.uint8)  # weights of about +-0.05
    if qtype == "Q4_K":  # d, dmin first
        raw[:, 0:2] = scale
        raw[:, 2:4] = scale
    else:  # Q6_K: ql, qh, 16 int8 scales, d last
        raw[:, 208:210] = scale
    return raw.reshape(rows, -1)


def write_gguf(path: str, shape: Shape, mix: str = "q4_k_m", seed: int = 0) -> str:
    import gguf

    rng = np.random.default_rng(seed)
    n = shape.layers
    plan: list[tuple[str, str, tuple[int, ...]]] = [("token_embd.weight", "Q4_K", (shape.vocab, shape.hidden))]
    for i in range(n):
        for name, _, rc in shape.matrices(i):
            bigger = mix == "q4_k_m" and (name.endswith(("attn_v.weight", "ffn_down.weight")) and _more_bits(i, n))
            plan.append((name, "Q6_K" if bigger else "Q4_K", rc))
        plan += [(nm, "F32", (shape.hidden,)) for nm, _ in shape.norms(i)]
    plan += [("output_norm.weight", "F32", (shape.hidden,)),
             ("output.weight", "Q6_K" if mix == "q4_k_m" else "Q4_K", (shape.vocab, shape.hidden))]
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(n)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if mix == "q4_k_m" else gguf.LlamaFileType.MOSTLY_Q4_K_S)
    # llama.cpp refuses a GGUF without tokenizer.ggml.model; "none" is its own word for a model
    # without a vocabulary (it then runs token ids, with vocab_size logits)
    w.add_tokenizer_model("none")
    for name, qtype, dims in plan:
        if qtype == "F32":
            w.add_tensor_info(name, dims, np.dtype(np.float32), 4 * dims[0])
        else:
            rows, cols = dims
            byte_shape = (rows, cols // QK_K * BLOCK_BYTES[qtype])
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), rows * byte_shape[1],
                              raw_dtype=gguf.GGMLQuantizationType[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _name, qtype, dims in plan:
        if qtype == "F32":
            w.write_tensor_data(np.ones(dims, dtype=np.float32))
        else:
            w.write_tensor_data(_kquant_blocks(rng, qtype, *dims))
    w.close()
    return path


# -- safetensors folders ------------------------------------------------------------------------

ITEMSIZE = {"BF16": 2, "F16": 2, "I32": 4}
# (name, safetensors dtype, dims, writer): the writer puts the tensor's bytes into the open file
Planned = tuple[str, str, tuple[int, ...], Callable[[BinaryIO], None]]


def _normal_rows(rng, rows: int, cols: int, dtype: str) -> Callable[[BinaryIO], None]:
    """A writer of random N(0, 0.02) weights in bf16 (bit patterns) or fp16, a block of rows at a time."""
    def write(f: BinaryIO) -> None:
        step = max(1, (1 << 24) // cols)
        for r in range(0, rows, step):
            x = rng.standard_normal((min(step, rows - r), cols), dtype=np.float32) * 0.02
            block = (x.view(np.uint32) >> 16).astype(np.uint16) if dtype == "BF16" else x.astype(np.float16)
            block.tofile(f)
    return write


def _ones(n: int, dtype: str) -> Callable[[BinaryIO], None]:
    one = 0x3F80 if dtype == "BF16" else 0x3C00  # 1.0 in bf16 / fp16: the norms
    return lambda f: np.full(n, one, dtype=np.uint16).tofile(f)


def _write_shards(folder: str, tensors: list[Planned], shard_bytes: int) -> None:
    """Sharded safetensors and their index, the layout transformers writes: each shard's header
    first, then its tensors one at a time."""
    def nbytes(dtype: str, dims: tuple[int, ...]) -> int:
        return ITEMSIZE[dtype] * int(np.prod(dims))

    shards: list[list[Planned]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + nbytes(t[1], t[2]) > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += nbytes(t[1], t[2])
    weight_map = {}
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header: dict[str, dict] = {}
        offset = 0
        for name, dtype, dims, _write in shard:
            header[name] = {"dtype": dtype, "shape": list(dims), "data_offsets": [offset, offset + nbytes(dtype, dims)]}
            offset += nbytes(dtype, dims)
            weight_map[name] = file
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(struct.pack("<Q", len(blob)) + blob)
            for name, _dtype, _dims, write in shard:
                write(f)
                if f.tell() != 8 + len(blob) + header[name]["data_offsets"][1]:
                    raise AssertionError(f"{name}: the writer wrote the wrong number of bytes")
    total = sum(nbytes(dtype, dims) for _, dtype, dims, _ in tensors)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as index:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, index)


def _write_config(folder: str, shape: Shape, torch_dtype: str, extra: dict | None = None) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden,
              "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
              "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
              "vocab_size": shape.vocab, "max_position_embeddings": shape.context, "rms_norm_eps": 1e-5,
              "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "torch_dtype": torch_dtype,
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, **(extra or {})}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def _plain(rng, shape: Shape, dtype: str, layer_tensors) -> list[Planned]:
    """The embedding, each layer's tensors (`layer_tensors(i)`) and norms, the final norm and the
    head, in the order transformers writes them."""
    h = shape.hidden
    tensors: list[Planned] = [("model.embed_tokens.weight", dtype, (shape.vocab, h),
                               _normal_rows(rng, shape.vocab, h, dtype))]
    for i in range(shape.layers):
        tensors += layer_tensors(i)
        tensors += [(hf, dtype, (h,), _ones(h, dtype)) for _, hf in shape.norms(i)]
    return tensors + [("model.norm.weight", dtype, (h,), _ones(h, dtype)),
                      ("lm_head.weight", dtype, (shape.vocab, h), _normal_rows(rng, shape.vocab, h, dtype))]


def write_bf16_folder(folder: str, shape: Shape, shard_bytes: int = 5 << 30, seed: int = 0) -> str:
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)

    def layer(i: int) -> list[Planned]:
        return [(hf, "BF16", rc, _normal_rows(rng, *rc, "BF16")) for _, hf, rc in shape.matrices(i)]

    _write_shards(folder, _plain(rng, shape, "BF16", layer), shard_bytes)
    _write_config(folder, shape, "bfloat16")
    return folder


# -- GPTQ ---------------------------------------------------------------------------------------

def pack_fields(values: np.ndarray, bits: int) -> np.ndarray:
    """`bits`-bit fields as one little-endian bit stream in int32 words (AutoGPTQ's packing; 3-bit
    fields span words)."""
    v = np.asarray(values, dtype=np.uint32).reshape(-1)
    stream = ((v[:, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8).reshape(-1)
    stream = np.concatenate([stream, np.zeros(-len(stream) % 32, dtype=np.uint8)])
    return np.packbits(stream, bitorder="little").view("<i4").astype(np.int32)


def _gptq_layer(rng, base: str, out_f: int, in_f: int, bits: int, group_size: int,
                desc_act: bool) -> list[Planned]:
    """One linear layer as GPTQ stores it: random codes (every bit pattern of qweight is a valid
    code), the symmetric zero point 2^(bits-1) stored minus one (checkpoint_format "gptq"), fp16
    scales that make weights of about +-0.05, and g_idx (permuted groups under act-order)."""
    gs = in_f if group_size == -1 else group_size
    groups = -(-in_f // gs)
    half = 1 << (bits - 1)

    def qweight(f: BinaryIO) -> None:
        rng.integers(0, 1 << 32, size=(in_f * bits // 32, out_f), dtype=np.uint32).tofile(f)

    def qzeros(f: BinaryIO) -> None:
        row = pack_fields(np.full(out_f, half - 1), bits)
        np.broadcast_to(row, (groups, len(row))).tofile(f)

    def scales(f: BinaryIO) -> None:
        (rng.uniform(0.5, 1.5, size=(groups, out_f)) * (0.05 / half)).astype(np.float16).tofile(f)

    def g_idx(f: BinaryIO) -> None:
        g = np.arange(in_f, dtype=np.int32) // gs
        if desc_act:  # act-order: input k is quantized at step perm^-1(k)
            g = g[np.argsort(rng.permutation(in_f))]
        g.astype("<i4").tofile(f)

    return [(base + ".qweight", "I32", (in_f * bits // 32, out_f), qweight),
            (base + ".qzeros", "I32", (groups, -(-out_f * bits // 32)), qzeros),
            (base + ".scales", "F16", (groups, out_f), scales),
            (base + ".g_idx", "I32", (in_f,), g_idx)]


def gptq_folder_bytes(shape: Shape, bits: int = 4, group_size: int = 128) -> int:
    """What write_gptq_folder writes, in bytes of tensor data (the headers and config are a few kB)."""
    total = 2 * (2 * shape.vocab * shape.hidden + (2 * shape.layers + 1) * shape.hidden)  # fp16
    for i in range(shape.layers):
        for _, _, (out_f, in_f) in shape.matrices(i):
            groups = 1 if group_size == -1 else -(-in_f // group_size)
            total += 4 * (in_f * bits // 32) * out_f + 4 * groups * -(-out_f * bits // 32)
            total += 2 * groups * out_f + 4 * in_f
    return total


def write_gptq_folder(folder: str, shape: Shape, bits: int = 4, group_size: int = 128, seed: int = 0,
                      desc_act: bool = False, shard_bytes: int = 5 << 30) -> str:
    """A Llama folder as AutoGPTQ / GPTQModel / optimum write it: every layer matrix GPTQ-packed
    (qweight, qzeros, scales, g_idx), the embedding, norms and head in fp16, config.json with its
    quantization_config (symmetric, checkpoint_format "gptq")."""
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"GPTQ packs 2, 3, 4 or 8 bits, not {bits}")
    inputs = {c for i in range(shape.layers) for _, _, (_, c) in shape.matrices(i)}
    if group_size != -1 and any(c % group_size for c in inputs) or any(c * bits % 32 for c in inputs):
        raise ValueError(f"group_size {group_size} and {bits} bits must divide the layers' inputs "
                         f"({', '.join(map(str, sorted(inputs)))}) into whole groups and int32 words")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)

    def layer(i: int) -> list[Planned]:
        return [t for _, hf, (out_f, in_f) in shape.matrices(i)
                for t in _gptq_layer(rng, hf.removesuffix(".weight"), out_f, in_f, bits, group_size, desc_act)]

    _write_shards(folder, _plain(rng, shape, "F16", layer), shard_bytes)
    quant = {"quant_method": "gptq", "bits": bits, "group_size": group_size, "desc_act": desc_act,
             "sym": True, "damp_percent": 0.01, "static_groups": False, "true_sequential": True,
             "checkpoint_format": "gptq", "model_file_base_name": None}
    _write_config(folder, shape, "float16", {"quantization_config": quant})
    return folder
