"""Write 8B- and 70B-shaped checkpoints without needing their memory: random weights, written
tensor by tensor (one tensor in memory at a time).

- `write_gguf(path, shape, mix="q4_k_m")`: a llama GGUF with llama.cpp's Q4_K_M mix (Q4_K for most
  matrices, Q6_K for the output head and for attn_v / ffn_down on the layers llama.cpp gives more
  bits), or "q4_k" (every matrix Q4_K). Blocks are random bytes with small, finite fp16 scales:
  every bit pattern of a K-quant block's codes and 6-bit scales is valid.
- `write_bf16_folder(path, shape)`: config.json + sharded bf16 safetensors with an index, the
  layout transformers writes (the safetensors header is written first, then the data).

Shapes: LLAMA_8B (Llama 3 8B), LLAMA_70B (Llama 3 70B), TINY (for the small modes and tests).
Needs gguf-py (`gguf`) for the GGUF writer.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

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
    plan: list[tuple[str, str, tuple[int, int]]] = [("token_embd.weight", "Q4_K", (shape.vocab, shape.hidden))]
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


def _bf16(rng, rows: int, cols: int) -> np.ndarray:
    """Random N(0, 0.02) weights as bfloat16 bit patterns (uint16), a block of rows at a time."""
    out = np.empty((rows, cols), dtype=np.uint16)
    step = max(1, (1 << 24) // cols)
    for r in range(0, rows, step):
        x = (rng.standard_normal((min(step, rows - r), cols), dtype=np.float32) * 0.02)
        out[r:r + step] = (x.view(np.uint32) >> 16).astype(np.uint16)
    return out


def write_bf16_folder(folder: str, shape: Shape, shard_bytes: int = 5 << 30, seed: int = 0) -> str:
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (shape.vocab, shape.hidden))]
    for i in range(shape.layers):
        tensors += [(hf, rc) for _, hf, rc in shape.matrices(i)]
        tensors += [(hf, (shape.hidden,)) for _, hf in shape.norms(i)]
    tensors += [("model.norm.weight", (shape.hidden,)), ("lm_head.weight", (shape.vocab, shape.hidden))]
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, dims in tensors:
        nbytes = 2 * int(np.prod(dims))
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, dims))
        size += nbytes
    weight_map = {}
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for name, dims in shard:
            nbytes = 2 * int(np.prod(dims))
            header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(struct.pack("<Q", len(blob)) + blob)
            for _name, dims in shard:
                if len(dims) == 1:
                    f.write(np.full(dims, 0x3F80, dtype=np.uint16).tobytes())  # 1.0: the norms
                else:
                    _bf16(rng, *dims).tofile(f)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 2 * shape.parameters}, "weight_map": weight_map}, f)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden,
              "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
              "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
              "vocab_size": shape.vocab, "max_position_embeddings": shape.context, "rms_norm_eps": 1e-5,
              "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return folder
