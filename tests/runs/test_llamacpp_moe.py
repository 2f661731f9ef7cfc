"""llama.cpp's mixture-of-experts tensors as points of its side (runs/llamacpp_side.py), against
transformers: a tiny random Mixtral (4 experts, top-2 renormalised; llama.cpp's converter writes
it as architecture llama) and a Qwen2-MoE (top-2 not renormalised, a shared expert behind a sigmoid
gate), each saved by transformers and written from that folder as an F32 GGUF with gguf-py the way
convert_hf_to_gguf.py writes it (experts stacked per projection, Llama's q/k rows permuted).

- every tensor llama.cpp's build_moe_ffn names (router logits and probabilities, the chosen
  experts' weights before and after renormalising, each chosen expert's gate, up, down and
  weighted output, their sum; the shared expert's output, gate and product) equals transformers'
  at the same place: the router's, the experts' and the shared expert's forward hooks, the
  experts module run again on one slot of the routing (F32 KV cache, rel < 1e-5);
- compared with our decoder on the folder, ffn_out pairs and agrees; the MoE tensors we have no
  point for are listed as only llama.cpp's, not dropped;
- a planted fault (one expert's down projection scaled, in the GGUF only) is the first
  divergence at that layer's ffn_out, named by blk.N.ffn_down_exps.weight and its bytes as
  gguf-py reads them.

Top-k ties: a near-tie between the k-th and (k+1)-th expert could pick different experts in two
float32 runs. With these seeds and ids the smallest gap between them, over every token and layer,
is far above float32 noise (asserted: MARGIN), so all three runs route alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.runtime.engines.llamacpp_eval import available

pytestmark = pytest.mark.reference
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("safetensors")
if available() is not None:
    pytest.skip(f"tracing llama.cpp needs llama-cpp-python: {available()}", allow_module_level=True)

IDS = list(range(3, 3 + 12))
FAULT_LAYER = 1
MARGIN = 1e-3  # the least gap between the k-th and the next expert's probability we accept
TOL = 1e-5
# model_type -> (GGUF architecture, config changes, seed)
FAMILIES = {
    "mixtral": ("llama", dict(num_local_experts=4, num_experts_per_tok=2), 0),
    "qwen2_moe": ("qwen2moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                   shared_expert_intermediate_size=48, norm_topk_prob=False), 0),
}
SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
             bos_token_id=1, eos_token_id=2, initializer_range=0.15)
# a layer's expert and shared-expert tensors, HF name (after "model.layers.N.") -> GGUF name (after "blk.N.")
MOE_BLOCK = {"block_sparse_moe.gate.weight": "ffn_gate_inp.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
             "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight"}
EXPERT_ROLE = {"w1": "gate", "w3": "up", "w2": "down", "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """llama.cpp's threads spin while they wait: one is the steady choice on a shared machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


def helpers():
    from quant_codec.test_demo import demo_helpers  # tests/runtime/conftest.py's builders

    return demo_helpers()


def write_moe_gguf(folder: str, path: str, arch: str, scale: dict[str, float] | None = None) -> str:
    """The folder's config.json and model.safetensors as llama.cpp's converter writes them: each
    layer's experts stacked into ffn_{gate,up,down}_exps [experts, out, in]; `scale` multiplies
    the named HF tensors first (a fault planted in the GGUF only)."""
    from safetensors.numpy import load_file

    h = helpers()
    cfg = json.loads((Path(folder) / "config.json").read_text())
    state = load_file(str(Path(folder) / "model.safetensors"))
    for name, factor in (scale or {}).items():
        state[name] = state[name] * np.float32(factor)
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_parameters"]["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_expert_count(cfg.get("num_local_experts") or cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if arch == "qwen2moe":
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = h.tiny_vocab(cfg["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    w.add_token_merges(vocab.merges)
    w.add_add_bos_token(False)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name, data in state.items():
        parts = name.split(".")
        if ".experts." in name:  # model.layers.N.<block>.experts.E.<proj>.weight
            role = EXPERT_ROLE[parts[-2]]
            experts.setdefault(f"blk.{parts[2]}.ffn_{role}_exps.weight", {})[int(parts[-3])] = data
            continue
        rest = ".".join(parts[3:])
        if rest in MOE_BLOCK:
            w.add_tensor(f"blk.{parts[2]}.{MOE_BLOCK[rest]}", data)
            continue
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            data = h.llama_cpp_permute(data, cfg["num_attention_heads" if "q_proj" in name else "num_key_value_heads"])
        w.add_tensor(h.gguf_name(name), data)
    for name, by_expert in experts.items():
        w.add_tensor(name, np.stack([by_expert[e] for e in sorted(by_expert)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def transformers_points(model, ids) -> dict:
    """transformers' activations at llama.cpp's points of each layer: forward hooks on the layers,
    the router, the experts and the shared expert; each chosen expert's output [tokens, k, hidden]
    from the experts module run on one slot of the routing."""
    got: dict = {}
    routed: dict = {}

    def hook(key, use_input=False):
        def f(_module, args, out):
            x = args[0] if use_input else out[0] if isinstance(out, tuple) else out
            got[key] = x.detach().reshape(len(ids), -1).float().numpy()
        return f

    def keep(i, what):
        def f(_module, args, out):
            routed[(i, what)] = (args, out)
        return f

    handles = []
    for i, layer in enumerate(model.model.layers):
        moe = layer.mlp
        handles += [layer.input_layernorm.register_forward_hook(hook((i, "attn_norm"))),
                    layer.post_attention_layernorm.register_forward_hook(hook((i, "attn_residual"), use_input=True)),
                    layer.post_attention_layernorm.register_forward_hook(hook((i, "ffn_norm"))),
                    moe.register_forward_hook(hook((i, "ffn_out"))), layer.register_forward_hook(hook((i, "residual"))),
                    moe.gate.register_forward_hook(keep(i, "router")), moe.experts.register_forward_hook(keep(i, "experts"))]
        if hasattr(moe, "shared_expert"):
            handles += [moe.shared_expert.register_forward_hook(hook((i, "ffn_shexp"))),
                        moe.shared_expert_gate.register_forward_hook(keep(i, "shared_gate"))]
    with torch.no_grad():
        got[(None, "logits")] = model(torch.tensor([list(ids)])).logits[0].float().numpy()
        for handle in handles:
            handle.remove()
        for i, layer in enumerate(model.model.layers):
            got.update(_moe_points(i, layer.mlp, routed))
    return got


def _moe_points(i: int, moe, routed: dict) -> dict:
    """Layer i's MoE points from what its hooks kept (called under no_grad, hooks removed)."""
    logits, scores, top = routed[(i, "router")][1]
    (h, _, _), summed = routed[(i, "experts")]
    probs = torch.softmax(logits.float(), dim=-1)
    k, n = top.shape[1], moe.experts.down_proj.shape[1]
    gate_up = torch.einsum("tkoh,th->tko", moe.experts.gate_up_proj[top], h)  # HF's rows: gate, then up
    one = torch.ones_like(scores[:, :1])
    out = {(i, "ffn_moe_logits"): logits, (i, "ffn_moe_probs"): probs,
           (i, "ffn_moe_weights"): probs.gather(-1, top), (i, "ffn_moe_gate"): gate_up[..., :gate_up.shape[-1] // 2],
           (i, "ffn_moe_up"): gate_up[..., gate_up.shape[-1] // 2:],
           (i, "ffn_moe_down"): torch.stack([moe.experts(h, top[:, s:s + 1], one) for s in range(k)], 1),
           (i, "ffn_moe_weighted"): torch.stack([moe.experts(h, top[:, s:s + 1], scores[:, s:s + 1])
                                                 for s in range(k)], 1)}
    if hasattr(moe, "shared_expert"):  # transformers' sum of the routed experts, before the shared one
        gate = torch.sigmoid(routed[(i, "shared_gate")][1])
        out.update({(i, "ffn_moe_out"): summed, (i, "ffn_shexp_gate"): gate})
    else:
        out[(i, "ffn_moe_weights_norm")] = scores  # Mixtral renormalises the chosen two
    assert out[(i, "ffn_moe_down")].shape[-1] == n
    return {key: v.float().numpy() for key, v in out.items()}


def top_k_margin(model, ids) -> float:
    """The least gap, over every token and layer, between the k-th expert's probability and the next."""
    gaps = []

    def f(_module, _args, out):
        p = torch.sort(torch.softmax(out[0].float(), -1), -1, descending=True).values
        k = out[2].shape[1]
        gaps.append(float((p[:, k - 1] - p[:, k]).min()))

    handles = [layer.mlp.gate.register_forward_hook(f) for layer in model.model.layers]
    with torch.no_grad():
        model(torch.tensor([list(ids)]))
    for handle in handles:
        handle.remove()
    return min(gaps)


class Family:
    """A tiny random MoE model of transformers: its saved folder, the GGUF written from it."""

    def __init__(self, mt: str, root: Path) -> None:
        h = helpers()
        self.mt, (self.arch, changes, seed) = mt, FAMILIES[mt]
        cfg = transformers.AutoConfig.for_model(mt, vocab_size=h.VOCAB_SIZE, **SIZES, **changes)
        torch.manual_seed(seed)
        self.model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if name.endswith("norm.weight"):  # norms that move the result
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
        self.folder = str(root / mt)
        self.model.save_pretrained(self.folder)
        h.write_tokenizer_files(self.folder, h.tiny_vocab(h.VOCAB_SIZE))
        self.gguf = write_moe_gguf(self.folder, str(root / f"{mt}.gguf"), self.arch)
        self.k = cfg.num_experts_per_tok

    def expert_name(self, layer: int, expert: int) -> str:
        block = "block_sparse_moe.experts.{e}.w2" if self.mt == "mixtral" else "mlp.experts.{e}.down_proj"
        return f"model.layers.{layer}.{block.format(e=expert)}.weight"


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory) -> Family:
    return Family(request.param, tmp_path_factory.mktemp("moe"))


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def test_routing_has_no_near_ties(family):
    """Seed 0 and these ids: the least gap is 3.8e-3 (Mixtral) and 6.5e-3 (Qwen2-MoE)."""
    margin = top_k_margin(family.model, IDS)
    assert margin > MARGIN, f"a near-tie ({margin:.2g}) could route the runs apart: choose another seed"


def test_llamacpp_moe_points_equal_transformers_hooks(family):
    t = mx.trace(family.gguf, ids=IDS, keep=True, engine="llama.cpp")
    ref = transformers_points(family.model, IDS)
    layers = range(family.model.config.num_hidden_layers)
    moe = {m for (_, m) in ref if m.startswith(("ffn_moe", "ffn_shexp"))}
    # every MoE tensor llama.cpp records has a reference here, and none is left out
    assert {m for (i, m) in t.activations if i is not None and m.startswith(("ffn_moe", "ffn_shexp"))} == moe | (
        {"ffn_shexp_out"} if family.mt == "qwen2_moe" else set())
    if family.mt == "qwen2_moe":
        for i in layers:
            ref[(i, "ffn_shexp_out")] = ref[(i, "ffn_shexp_gate")] * ref[(i, "ffn_shexp")]
    for key, want in ref.items():
        got = t.activations[key]
        assert got.shape == want.shape, (key, got.shape, want.shape)
        assert rel(got, want) < TOL, (key, rel(got, want))
    assert t.activations[(0, "ffn_moe_down")].shape == (len(IDS), family.k, 64)
    assert t.tensors[(FAULT_LAYER, "ffn_moe_down")][0] == f"blk.{FAULT_LAYER}.ffn_down_exps.weight"
    assert t.tensors[(FAULT_LAYER, "ffn_moe_logits")] == [f"blk.{FAULT_LAYER}.ffn_gate_inp.weight"]
    if family.mt == "qwen2_moe":
        assert t.tensors[(0, "ffn_shexp_gate")] == ["blk.0.ffn_gate_inp_shexp.weight"]
        assert t.tensors[(0, "ffn_shexp")][0] == "blk.0.ffn_down_shexp.weight"


def test_ours_against_llamacpp_pairs_ffn_out_and_lists_its_moe_tensors(family):
    d = mx.compare_runs(family.folder, family.gguf, ids=IDS, b_engine="llama.cpp")
    assert d.agree and d.first_divergence is None, d.summary()
    rows = {(r["layer"], r["module"]): r for r in d.rows}
    assert all(rows[(i, "ffn_out")]["rel_l2"] < TOL for i in range(2))
    own = {"kqv_out", "ffn_moe_logits", "ffn_moe_probs", "ffn_moe_weights", "ffn_moe_gate", "ffn_moe_up",
           "ffn_moe_down", "ffn_moe_weighted"}
    own |= ({"ffn_moe_out", "ffn_shexp", "ffn_shexp_gate", "ffn_shexp_out"} if family.mt == "qwen2_moe"
            else {"ffn_moe_weights_norm"})
    ours_alone = {"attn_out"} if family.mt == "qwen2_moe" else set()  # qwen2moe's graph leaves it unnamed
    assert {(u["layer"], u["module"]): u["why"] for u in d.unpaired} == {
        **{(i, m): "only b records it" for i in range(2) for m in own},
        **{(i, m): "only a records it" for i in range(2) for m in ours_alone}}


def test_planted_expert_fault_is_found_on_llamacpps_stacked_tensor(family, tmp_path):
    """One expert's down projection scaled in the GGUF: the expert the most tokens chose there."""
    ref = transformers_points(family.model, IDS)
    chosen = np.argsort(-ref[(FAULT_LAYER, "ffn_moe_probs")], axis=-1, kind="stable")[:, :family.k]
    expert = int(np.bincount(chosen.ravel()).argmax())
    path = write_moe_gguf(family.folder, str(tmp_path / "faulty.gguf"), family.arch,
                          scale={family.expert_name(FAULT_LAYER, expert): 3.0})
    d = mx.compare_runs(family.folder, path, ids=IDS, b_engine="llama.cpp")
    first = d.first_divergence
    assert first is not None and first["kind"] == "jump", d.summary()
    assert (first["layer"], first["module"]) == (FAULT_LAYER, "ffn_out")
    name = f"blk.{FAULT_LAYER}.ffn_down_exps.weight"
    assert first["tensor"] == name
    info = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    assert (first["offset"], first["length"]) == (int(info.data_offset), int(info.n_bytes))
    before = [r for r in d.rows if r["layer"] is not None and (r["layer"] < FAULT_LAYER or r["module"] in (
        "attn_norm", "q", "k", "v", "attn_out", "attn_residual", "ffn_norm"))]
    assert before and max(r["rel_l2"] for r in before) < TOL
