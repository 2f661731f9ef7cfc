"""mx.graph of a weight-only checkpoint: the family's block graph (issue 40). Against the
reference libraries: transformers' own model (its parameters, its modules per layer), the
safetensors library's key list and gguf-py's tensor list of the real files; every tensor sits on
exactly one node, a tied head says so, edges run in data-flow order."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model.decoder_points import MODULES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the real files
import realfiles  # noqa: E402


def _once(g) -> Counter:
    """How many nodes read each tensor, the tied head's read of the embedding left out."""
    return Counter(w for _, row in g.nodes.iterrows() if row["op"] != "Linear (tied)" for w in row["weights"])


def _data_flow_order(g) -> None:
    """Every edge runs from an earlier node to a later one: the table is in data-flow order."""
    at = {node_id: i for i, node_id in enumerate(g.nodes["id"])}
    assert g.nodes["id"].is_unique
    assert all(at[s] < at[t] for s, t in zip(g.edges["source"], g.edges["target"]))


def _weighted_per_layer(g) -> Counter:
    """Nodes that read a weight, per layer."""
    rows = g.nodes[g.nodes["layer"].map(lambda v: v is not None) & g.nodes["weights"].map(bool)]
    return Counter(rows["layer"])


def _leaf_modules_with_parameters(layer) -> int:
    return sum(1 for _, m in layer.named_modules()
               if not list(m.children()) and list(m.parameters(recurse=False)))


@pytest.mark.parametrize("tied,saved", [(False, "safetensors"), (True, "safetensors"), (False, "sharded"),
                                         (True, "state dict")])
def test_transformers_llama_block_graph(tmp_path, tied, saved):
    """save_pretrained's safetensors (one file, or shards with an index), torch.save's state dict."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    model = transformers.LlamaForCausalLM(cfg)
    if saved == "state dict":
        cfg.save_pretrained(tmp_path)
        state = {k: v for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
        __import__("torch").save(state, tmp_path / "pytorch_model.bin")
    else:
        model.save_pretrained(tmp_path, max_shard_size="20KB" if saved == "sharded" else "5GB")
    assert (len(list(tmp_path.glob("*.safetensors"))) > 1) == (saved == "sharded")
    g = mx.graph(str(tmp_path))
    stored = set(mx.open(str(tmp_path)).tensors)
    params = {n for n, _ in model.named_parameters()}  # transformers lists a tied head once
    assert stored == params
    once = _once(g)
    assert set(once) == stored and set(once.values()) == {1} and not g.unused
    assert g.tied == ("model.embed_tokens.weight" if tied else None)
    if tied:
        assert "tied" in g.outline()
    head = g.node_at(None, "logits")
    assert head["weights"] == (["model.embed_tokens.weight"] if tied else ["lm_head.weight"])
    want = _leaf_modules_with_parameters(model.model.layers[0])
    assert _weighted_per_layer(g) == Counter({i: want for i in range(3)})
    assert sorted(set(g.nodes["group"]) - {""}) == [f"layers.{i}" for i in range(3)]
    _data_flow_order(g)
    # every point of the decoder finds its node, and the projection's weights are on it
    for i in range(3):
        for module in MODULES[1:-2]:
            assert g.node_at(i, module) is not None, (i, module)
    assert g.node_at(1, "q")["weights"] == ["model.layers.1.self_attn.q_proj.weight"]
    assert set(g.node_at(2, "ffn_out")["weights"]) == {"model.layers.2.mlp.down_proj.weight"}
    assert g.node_at(None, "embed")["weights"] == ["model.embed_tokens.weight"]
    # the residual adds: the block's input reaches both adds
    ins = g.node_at(1, "attn_residual")["inputs"]
    assert g.node_at(0, "residual")["id"] in ins


def test_real_minilm_block_graph():
    safetensors = pytest.importorskip("safetensors")
    transformers = pytest.importorskip("transformers")
    folder = realfiles.need(realfiles.minilm_folder())
    with safetensors.safe_open(str(Path(folder, "model.safetensors")), "np") as f:
        keys = set(f.keys())
    g = mx.graph(folder)
    once = _once(g)
    assert set(once) == keys and set(once.values()) == {1} and not g.unused
    assert g.tied is None  # an encoder has no head to tie
    config = transformers.AutoConfig.from_pretrained(folder)
    with __import__("torch").device("meta"):
        model = transformers.AutoModel.from_config(config)
    want = _leaf_modules_with_parameters(model.encoder.layer[0])
    assert _weighted_per_layer(g) == Counter({i: want for i in range(config.num_hidden_layers)})
    _data_flow_order(g)


def test_real_gemma3_gguf_block_graph(tmp_path):
    """The tensor list is our reader's (checked against GGUFReader in the foundation tests; its
    40 s parse of Gemma's 262k-token vocabulary is not repeated here); the expectation per block
    is transformers' Gemma 3 decoder layer (its modules with parameters) and every name is one
    gguf-py's table lists for gemma3."""
    gguf = pytest.importorskip("gguf")
    transformers = pytest.importorskip("transformers")
    path = realfiles.need(realfiles.gemma3_gguf(tmp_path))
    names = set(mx.open(path).tensors)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == "gemma3")
    templates = [gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]]
    known = {t.format(bid=i) + leaf for t in templates for i in range(18) for leaf in (".weight", ".bias")}
    assert names <= known
    g = mx.graph(path)
    once = _once(g)
    assert set(once) == names and set(once.values()) == {1} and not g.unused
    assert "output.weight" not in names and g.tied == "token_embd.weight" and "tied" in g.outline()
    cfg = transformers.Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    with __import__("torch").device("meta"):
        layer = transformers.Gemma3ForCausalLM(cfg).model.layers[0]
    want = _leaf_modules_with_parameters(layer)
    assert _weighted_per_layer(g) == Counter({i: want for i in range(18)})
    assert "layers.0 .. layers.17 (18 alike, each)" in g.outline()
    _data_flow_order(g)


@pytest.mark.parametrize("scheme", ["gptq", "awq", "bnb4", "bnb8", "ct_pack"])
def test_hub_quantized_llama_block_graph(tmp_path, scheme):
    """A Hub-quantized folder in the names each quantizer writes (tests/quant_format/layouts.py):
    a weight (its codes, scales, zeros and quant state) sits on its projection's node, so a block has
    as many weighted nodes as transformers' Llama layer has modules with parameters."""
    transformers = pytest.importorskip("transformers")
    from quant_format import layouts

    tensors, quant = getattr(layouts, scheme)()
    folder = layouts.write(tmp_path / scheme, tensors, quant)
    g, ckpt = mx.graph(str(folder)), mx.open(str(folder))
    once = _once(g)  # the reader joins a weight's codes, scales and zeros into one logical tensor
    assert set(once) == set(ckpt.tensors) and set(once.values()) == {1} and not g.unused
    c = layouts.config(None)
    cfg = transformers.LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                                   intermediate_size=c["intermediate_size"], num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    with __import__("torch").device("meta"):
        layer = transformers.LlamaForCausalLM(cfg).model.layers[0]
    assert _weighted_per_layer(g) == Counter({0: _leaf_modules_with_parameters(layer)})
    assert g.node_at(0, "q")["name"] == "model.layers.0.self_attn.q_proj"


FAMILIES = {  # model_type -> (config class, model class, config beyond the small shape)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=32)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=3, num_experts_per_tok=2)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1,
        q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
        topk_group=1, n_shared_experts=1)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_other_families_block_graphs(tmp_path, family):
    """Fused Conv1D attention and a tied head (GPT-2), norms after each sublayer (OLMo 2), experts
    (Mixtral), latent attention with dense then routed layers (DeepSeek-V3): every parameter
    transformers saves on one node; a dense family's block has one weighted node per module with
    parameters; a mixture's experts node holds every expert of its layer."""
    transformers = pytest.importorskip("transformers")
    cfg_name, model_name, extra = FAMILIES[family]
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    kw = extra if family == "gpt2" else {**small, **extra}
    cfg = getattr(transformers, cfg_name)(**{**kw, "vocab_size": 64})
    model = getattr(transformers, model_name)(cfg)
    model.save_pretrained(tmp_path)
    g = mx.graph(str(tmp_path))
    once = _once(g)
    assert set(once) == set(mx.open(str(tmp_path)).tensors) and set(once.values()) == {1} and not g.unused
    _data_flow_order(g)
    safetensors = pytest.importorskip("safetensors")
    with safetensors.safe_open(str(tmp_path / "model.safetensors"), "np") as f:
        saved = list(f.keys())  # transformers 5 holds experts fused and saves each one apart
    layers = model.transformer.h if family == "gpt2" else model.model.layers
    for i, layer in enumerate(layers):
        experts = [n for n in saved if n.startswith(f"model.layers.{i}.") and ".experts." in n]
        if experts:
            node = g.nodes[(g.nodes["layer"] == i) & (g.nodes["op"] == "Experts")].iloc[0]
            assert sorted(node["weights"]) == sorted(experts) and node["module"] == "ffn_out"
        else:
            assert _weighted_per_layer(g)[i] == _leaf_modules_with_parameters(layer), i
        for module in ("q", "k", "v", "attn_out", "attn_residual", "ffn_out", "residual"):
            assert g.node_at(i, module) is not None, (i, module)
    assert (g.tied is not None) == (family == "gpt2")


@pytest.mark.parametrize("overrides", [{}, {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}])
def test_every_trace_point_finds_its_node(tmp_path, overrides):
    """mx.trace's points (layer, module) each find their node by the two columns, and the weight
    the run names first for a point sits on that node or just upstream of it (q's projection
    before its q norm, the output projection before the residual add)."""
    from model.conftest import tiny_cfg, tiny_state, write_folder

    cfg = tiny_cfg(**overrides)
    state = tiny_state(cfg)
    if overrides:  # Qwen3's q and k norms, [head_dim]
        for i in range(cfg["num_hidden_layers"]):
            for p in ("q", "k"):
                state[f"model.layers.{i}.self_attn.{p}_norm.weight"] = np.ones(cfg["head_dim"], np.float32)
    folder = write_folder(tmp_path, cfg, state)
    t = mx.trace(folder, ids=[1, 2, 3])
    g = mx.graph(folder)
    into: dict[str, set[str]] = {}
    for s, d in zip(g.edges["source"], g.edges["target"]):
        into.setdefault(d, set()).add(s)
    rows = {r["id"]: r for _, r in g.nodes.iterrows()}
    assert t.tensors and g.node_at(None, "logits") is not None
    for (layer, module), names in t.tensors.items():
        row = g.node_at(layer, module)
        assert row is not None, (layer, module)
        near, frontier = {row["id"]}, {row["id"]}
        for _ in range(3):
            frontier = {s for n in frontier for s in into.get(n, ())}
            near |= frontier
        assert names[0] in {w for n in near for w in rows[n]["weights"]}, (layer, module, names[0])


@pytest.mark.parametrize("target", ["mlx", "gguf"])
def test_converted_llama_block_graph(tmp_path, target):
    """The same small Llama written as MLX (4-bit affine: scales and biases beside each weight)
    and as a Q8_0 GGUF (llama.cpp's names): every tensor the safetensors library or gguf-py lists
    sits on one node, and each block has transformers' modules with parameters."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path / "src")
    if target == "mlx":
        safetensors = pytest.importorskip("safetensors")
        out = mx.convert(str(tmp_path / "src"), tmp_path / "mlx", format="mlx", bits=4, group_size=32)
        names = set()
        for f in Path(out).glob("*.safetensors"):
            with safetensors.safe_open(str(f), "np") as st:
                names |= set(st.keys())
    else:
        gguf = pytest.importorskip("gguf")
        out = mx.convert(str(tmp_path / "src"), tmp_path / "m.gguf", format="gguf", dtype="Q8_0")
        names = {t.name for t in gguf.GGUFReader(out).tensors}
    g, ckpt = mx.graph(str(out)), mx.open(str(out))
    once = _once(g)
    assert set(once) == set(ckpt.tensors) and set(once.values()) == {1} and not g.unused
    parts = {p.name for t in ckpt.tensors.values() if t.quant is not None for p in (t.quant.parts or {}).values()}
    assert names == set(ckpt.tensors) | parts  # the reader's logical tensors cover every stored one
    want = _leaf_modules_with_parameters(model.model.layers[0])
    assert _weighted_per_layer(g) == Counter({0: want, 1: want})
