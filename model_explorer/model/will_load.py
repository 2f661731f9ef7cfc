"""Will it load: the checkpoint's tensors against the ones its architecture expects.

Mismatches are explained, not listed: a prefix on every key (DDP's `module.`, torch.compile's
`_orig_mod.`, a PEFT wrapper's `base_model.model.`) is one finding with its count; an
output projection missing while the config does not tie it, a weight stored transposed, and a
hyperparameter the shapes contradict each get their own cause and fix. What is left over is
reported the way transformers reports it at load: missing, unexpected, shape-mismatched.
Only headers are read.
"""

from __future__ import annotations

import re
from collections import Counter

from ..records import CheckpointRecord, TensorInfo
from ..spans import Finding
from . import expected as exp_mod
from . import families
from .findings import model_finding
from .hparams import HParams, Sourced, embedding, info_span
from .renames import one_to_one
from .sidefiles import side_path

# prefix -> (what leaves it, how to strip it)
KNOWN_PREFIXES = {
    "module.": "torch DistributedDataParallel / DataParallel (the wrapper's state_dict was saved)",
    "_orig_mod.": "torch.compile (the compiled wrapper's state_dict was saved)",
    "base_model.model.": "a PEFT wrapper saved as a full model (merge_and_unload() before saving)",
    "model.": "a wrapper module around the model (its attribute name became part of every key)",
}
LIST_SHOWN = 6
PACKED_DTYPES = ("U8", "I8", "I32", "U32", "I16", "U16", "BOOL")


def _short(names, n: int = LIST_SHOWN) -> str:
    names = list(names)
    text = ", ".join(repr(x) for x in names[:n])
    return text + (f" and {len(names) - n:,} more" if len(names) > n else "")


def _loc(info: TensorInfo | None) -> dict:
    if info is None:
        return {}
    off, ln = info_span(info)
    return {"offset": off, "length": ln, "tensor": info.name, "file": info.file}


def expected_for(ckpt: CheckpointRecord, hp: HParams, cross_check: bool = False
                 ) -> tuple[exp_mod.Expected | None, list[Finding]]:
    """The expected tensors and any info finding about where they came from.

    At open (`cross_check=False`) only the built-in family tables are used: they need no torch,
    so opening never waits seconds for it. `cross_check=True` (doctor, the Model tab, repairs,
    `ckpt.cross_check()`) builds the architecture with transformers on the meta device when it is
    installed, and falls back to the tables when it is not or cannot build the config."""
    notes: list[Finding] = []
    # The tables list layers up to the count the tensors show (+1), never a header's bare number.
    shown = {int(m[1]) for n in ckpt.tensors if (m := _ANY_LAYER.search(n))}
    cap = min(exp_mod.MAX_LAYERS, (max(shown) + 2) if shown else 1)
    if hp.origin == "gguf":
        e = exp_mod.for_gguf(hp, cap)
        if e is None:
            notes.append(model_finding("unknown_architecture", f"GGUF architecture {hp.architecture!r} "
                                       "is in neither gguf-py's tensor tables nor the built-in llama "
                                       "table: the tensor names were not checked.",
                                       **_kv_loc(hp.values.get("architecture"))))
        return e, notes
    if hp.origin != "config.json":
        return None, notes
    cfg = ckpt.metadata.get("config.json")
    e = None
    if cross_check and exp_mod.transformers_available():
        try:
            e = exp_mod.from_transformers(cfg)
        except exp_mod.NotBuildable as why:
            notes.append(model_finding("unknown_architecture", f"{why}; the built-in checks ran instead.",
                                       **_kv_loc(hp.values.get("model_type") or hp.values.get("architecture"))))
    if e is None:
        e = exp_mod.builtin(hp, config=cfg, max_layers=cap)
        if e is None and not notes and (cross_check or not exp_mod.transformers_available()):
            hint = ("install transformers for the full check" if not exp_mod.transformers_available()
                    else "transformers could not build it either")
            notes.append(model_finding("unknown_architecture", f"model_type {hp.model_type!r} is not in the "
                                       f"built-in family tables ({hint}): only the config-against-shape "
                                       "checks ran.", **_kv_loc(hp.values.get("model_type"))))
    return e, notes


def _kv_loc(s: Sourced | None) -> dict:
    if s is None:
        return {}
    return {"offset": s.offset, "length": s.length, "file": s.file}


# -- prefixes --------------------------------------------------------------------------------------

def find_prefix(actual: list[str], want: set[str]) -> tuple[str, str, int] | None:
    """("strip"|"add", prefix, count) when renaming by a prefix makes most unmatched keys match."""
    unmatched = [n for n in actual if n not in want]
    if not want or len(unmatched) < max(1, len(actual) // 2):
        return None
    candidates = list(KNOWN_PREFIXES)
    firsts = Counter(n.split(".", 1)[0] + "." for n in unmatched if "." in n)
    candidates += [p for p, _ in firsts.most_common(3) if p not in candidates]
    best = None
    for p in candidates:
        count = sum(1 for n in unmatched if n.startswith(p) and n[len(p):] in want)
        if count and (best is None or count > best[2]):
            best = ("strip", p, count)
    for p in ("model.",):  # a base model saved without its head's wrapper
        count = sum(1 for n in unmatched if p + n in want)
        if count and (best is None or count > best[2]):
            best = ("add", p, count)
    if best is None or best[2] < max(1, len(unmatched) // 2):
        return None
    return best


def _renamed(name: str, how: tuple[str, str, int] | None, want: set[str]) -> str:
    if how is None or name in want:
        return name
    kind, p, _ = how
    if kind == "strip" and name.startswith(p) and name[len(p):] in want:
        return name[len(p):]
    if kind == "add" and p + name in want:
        return p + name
    return name


def _is_adapter(ckpt: CheckpointRecord) -> bool:
    return side_path(ckpt, "adapter_config.json") is not None


# -- the comparison --------------------------------------------------------------------------------

def check(ckpt: CheckpointRecord, hp: HParams, cross_check: bool = False) -> list[Finding]:
    """Findings for the checkpoint's tensors against what its architecture expects
    (`cross_check`: against transformers' build of it, see `expected_for`)."""
    if not ckpt.tensors or _is_adapter(ckpt) or not hp.describes_model:
        return []
    out: list[Finding] = []
    e, notes = expected_for(ckpt, hp, cross_check)
    out += notes
    actual_names = list(ckpt.tensors)
    want = set(e.shapes) if e is not None else set()
    how = find_prefix(actual_names, want) if e is not None else None
    if how is not None:
        out.append(_prefix_finding(ckpt, how, len(actual_names)))
    # name the model uses -> the checkpoint's TensorInfo
    by_name: dict[str, TensorInfo] = {}
    for n in actual_names:
        by_name.setdefault(_renamed(n, how, want), ckpt.tensors[n])
    for alias, name in (e.aliases.items() if e is not None else ()):
        if alias in by_name and name not in by_name:  # a name transformers also loads it from
            by_name[name] = by_name.pop(alias)
    explained, mismatches = _quantities(ckpt, hp, by_name)
    out += mismatches
    if e is None:
        return out
    out += _compare(ckpt, hp, e, by_name, explained)
    return out


def _prefix_finding(ckpt: CheckpointRecord, how: tuple[str, str, int], total: int) -> Finding:
    kind, p, count = how
    names = [n for n in ckpt.tensors if (n.startswith(p) if kind == "strip" else True)]
    first = next((n for n in names if n.startswith(p + p)), names[0])
    info = ckpt.tensors[first]
    if kind == "add":
        return model_finding("key_prefix", f"{count:,} of {total:,} tensor names lack the {p!r} prefix the "
                             f"model's names have (e.g. {first!r}): the base model was saved without its "
                             "head. transformers adds the prefix when loading.", severity="info",
                             fix="", prefix=p, count=count, how="add", **_loc(info))
    doubled = p == "model." and first.startswith("model.model.")
    cause = ("the model was saved from inside a wrapper that also names its child 'model' "
             "('model.model.')" if doubled else KNOWN_PREFIXES.get(p, "a wrapper module around the model"))
    return model_finding("key_prefix", f"{count:,} of {total:,} tensor names start with {p!r}, which the "
                         f"model's own names lack (e.g. {first!r}): saved from {cause}. Every one of them "
                         "would load as missing plus unexpected.",
                         fix=f"Strip the prefix from the keys: {{k.removeprefix({p!r}): v for k, v in "
                         "state_dict.items()}, then save again (or save the unwrapped model's state_dict).",
                         prefix=p, count=count, how="strip", **_loc(info))


def _compare(ckpt: CheckpointRecord, hp: HParams, e: exp_mod.Expected, by_name: dict[str, TensorInfo],
             explained: dict[str, set[int]]) -> list[Finding]:
    out: list[Finding] = []
    tied_cfg = hp.get("tied_embeddings")
    layer_re = re.compile(r"(?:^|\.)(?:layers|blk|h|block|blocks)\.(\d+)\.")
    bad_layers = explained.get("layers", set())
    n_layers = max(bad_layers) if bad_layers else None  # the count the tensors show

    def beyond(name: str, limit: int | None) -> bool:
        m = layer_re.search(name)
        return bool(m and limit is not None and int(m[1]) >= limit)

    # A quantized checkpoint (GPTQ/AWQ qweight + scales, bitsandbytes weight.absmax, compressed-
    # tensors weight_packed...) stores a linear layer under other names: the module is there when
    # any tensor of it is, and its extra tensors are not unexpected.
    quantized = _quantized(ckpt, by_name)
    modules = {n.rsplit(".", 1)[0] for n in by_name} if quantized else set()
    expected_modules = {n.rsplit(".", 1)[0] for n in e.shapes} if quantized else set()

    def quant_part(n: str) -> bool:
        parts = n.split(".")
        return any(".".join(parts[:k]) in expected_modules for k in range(len(parts) - 1, 0, -1))

    # missing
    missing = []
    for name in sorted(e.required, key=_natural):
        if name in by_name or e.is_ignored_missing(name):
            continue
        if quantized and name.rsplit(".", 1)[0] in modules:
            continue
        src = e.tied.get(name)
        if src is not None and src in by_name:
            continue
        if name == e.head:
            continue  # judged below, with the config's tie setting
        if bad_layers and beyond(name, n_layers):
            continue  # explained by the layer-count mismatch
        missing.append(name)
    head_missing = (e.head is not None and e.head not in by_name and hp.origin == "config.json"
                    and not e.tied.get(e.head) and tied_cfg is not True)
    extra = _unexpected(hp, e, by_name, bad_layers, quantized, quant_part, beyond) if e.complete else []
    wanted = {n: e.shapes.get(n) for n in missing}
    if head_missing and e.head in e.shapes:
        wanted[e.head] = e.shapes[e.head]
    # {stored name: expected name} when the names are one module renamed in every layer
    renames = one_to_one(wanted, {n: by_name[n].shape for n in extra})
    rename_fix = _rename_fix(renames) if renames else None
    if head_missing and e.head in renames.values():
        head_missing = False  # stored under another name: the rename below is the finding
    if head_missing:
        tie = hp.values.get("tied_embeddings")
        said = (f"{tie.where()} is {tie.value!r}" if tie is not None and tie.source != "default"
                else "config.json does not set tie_word_embeddings" if tie is None
                else f"tie_word_embeddings is left out and {hp.model_type} defaults to {tie.value!r}")
        out.append(model_finding("lm_head_missing", f"The checkpoint has no {e.head!r}, but {said}: "
                                 "the output projection would be initialised at random.",
                                 **({"offset": tie.offset, "length": tie.length, "file": tie.file}
                                    if tie is not None and tie.offset is not None else {}),
                                 tensor=e.head))
    if missing:
        out.append(model_finding("missing_tensors", f"{len(missing):,} tensor(s) that {e.source} expects "
                                 f"are not in the checkpoint: {_short(missing)}.", missing=missing,
                                 source=e.source, fix=rename_fix, **({"renames": renames} if renames else {})))
    elif renames:  # only the head was renamed
        out.append(model_finding("missing_tensors", f"{e.head!r} is not in the checkpoint, but "
                                 f"{_short([k for k, v in renames.items() if v == e.head])} has its shape.",
                                 missing=[e.head], source=e.source, fix=rename_fix, renames=renames,
                                 tensor=e.head))
    # A GGUF none of whose names llama.cpp knows is not a model of its architecture (a test or
    # scratch file of tensors): there is no model to compare with.
    overlap = any(n in e.shapes or (e.known is not None and e.known.match(n)) for n in by_name)
    if hp.origin == "gguf" and not overlap:
        return []
    # unexpected
    if extra:
        out.append(model_finding("unexpected_tensors", f"{len(extra):,} tensor(s) are not part of "
                                 f"{e.source}: {_short(extra)}; a loader ignores them.",
                                 unexpected=extra, source=e.source, **_loc(by_name[extra[0]]),
                                 fix=rename_fix, **({"renames": renames} if renames else {})))
    # shapes
    odd = []
    skip_values = set().union(*(v for q, v in explained.items() if q != "layers"))
    for name, want in e.shapes.items():
        info = by_name.get(name)
        if info is None or want is None or not _shape_says(info):
            continue
        have = tuple(info.shape)
        # a quantized tensor of an [in, out] parameter (gpt-oss experts) is stored [out, in]
        want = families.stored_shape(hp.model_type, name, tuple(want), bool(info.quant))
        if have == want:
            continue
        if len(want) == 2 and have == tuple(reversed(want)) and want[0] != want[1]:
            out.append(model_finding("transposed_weight", f"{info.name!r} has shape {list(have)}; "
                                     f"{e.source} expects {list(want)}, the same dimensions reversed: "
                                     "the weight was stored transposed.", expected=list(want),
                                     found=list(have), **_loc(info)))
            continue
        if set(want) & skip_values and len(have) == len(want):
            continue  # a config_mismatch already explains it
        odd.append((info, want, have))
    for info, want, have in odd[:LIST_SHOWN]:
        out.append(model_finding("shape_mismatch", f"{info.name!r} has shape {list(have)}; {e.source} "
                                 f"expects {list(want)}.", expected=list(want), found=list(have), **_loc(info)))
    if len(odd) > LIST_SHOWN:
        rest = odd[LIST_SHOWN:]
        out.append(model_finding("shape_mismatch", f"{len(rest):,} more tensor(s) differ in shape from "
                                 f"{e.source}: {_short([i.name for i, _, _ in rest])}.",
                                 tensors=[i.name for i, _, _ in rest]))
    return out


QUANT_SUFFIXES = (".qweight", ".qzeros", ".g_idx", ".weight_packed", ".weight_scale", ".SCB", ".absmax",
                  ".weight_shape", ".scales", ".biases")


def _unexpected(hp: HParams, e: exp_mod.Expected, by_name: dict[str, TensorInfo], bad_layers, quantized: bool,
                quant_part, beyond) -> list[str]:
    """Stored names the architecture does not have, leaving out what another finding explains."""
    return [n for n in by_name if n not in e.shapes and not e.is_ignored_unexpected(n)
            and not (quantized and quant_part(n))
            and not (bad_layers and beyond(n, hp.get("layers")))
            and not (n == "lm_head.weight" and e.head is None)]


def _rename_fix(renames: dict[str, str]) -> str:
    pairs = {}
    for old, new in renames.items():  # one line per pattern, not per layer
        pairs.setdefault((re.sub(r"\.\d+\.", ".N.", old), re.sub(r"\.\d+\.", ".N.", new)), 0)
    shown = "; ".join(f"{a} -> {b}" for a, b in list(pairs)[:4])
    return (f"The names are one module renamed: {shown} ({len(renames)} tensor(s), shapes match). "
            "mx.repair(src, dest) writes a copy with the expected names.")


def _shape_says(info: TensorInfo) -> bool:
    """Whether a tensor's shape is the weight's own. A grouped quantized layer (GPTQ, AWQ,
    bitsandbytes, compressed-tensors, FP8, MXFP4, MLX) carries its logical shape; one the format
    layer could not decode (`unusable`), or packed integers left ungrouped (bitsandbytes'
    [n/2, 1] codes), say nothing about widths or heads."""
    if info.quant:
        return info.quant.get("kind") != "unusable"
    return info.dtype not in PACKED_DTYPES


def _quantized(ckpt: CheckpointRecord, by_name: dict[str, TensorInfo]) -> bool:
    cfg = ckpt.metadata.get("config.json")
    if isinstance(cfg, dict) and (cfg.get("quantization_config") or cfg.get("quantization")):
        return True
    return any(n.endswith(QUANT_SUFFIXES) or ".quant_state." in n for n in by_name)


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# -- hyperparameters against shapes ---------------------------------------------------------------

_Q = ("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight")
_K = ("model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight")
_UP = ("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", "model.layers.0.mlp.gate_proj.weight",
       "blk.0.ffn_gate.weight")
_LAYER = re.compile(r"^(?:model\.(?:language_model\.)?layers|blk|transformer\.h|model\.decoder\.layers|"
                    r"gpt_neox\.layers|transformer\.blocks)\.(\d+)\.")
_ANY_LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h|blocks)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_EXPS = ("blk.0.ffn_up_exps.weight", "blk.0.ffn_gate_exps.weight")


def _pos_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _first(by_name: dict[str, TensorInfo], names) -> TensorInfo | None:
    return next((by_name[n] for n in names if n in by_name), None)


def _quantities(ckpt: CheckpointRecord, hp: HParams, by_name: dict[str, TensorInfo]
                ) -> tuple[dict[str, set[int]], list[Finding]]:
    """Each hyperparameter the tensors pin down, against the config. Returns the values that
    disagree ({quantity: {config value, tensor value}}, so per-tensor lines can be skipped)."""
    out: list[Finding] = []
    explained: dict[str, set[int]] = {}
    gguf = hp.origin == "gguf"

    def check(q: str, found: int | None, info: TensorInfo | None, what: str) -> None:
        s = hp.values.get(q)
        if s is None or found is None or not isinstance(s.value, int) or isinstance(s.value, bool):
            return
        if s.source in ("tensor", "default"):
            return
        if s.value == found:
            return
        scale = _pos_int(hp.get("head_dim")) if q in ("heads", "kv_heads") else 1  # the dims the shapes show
        explained[q] = {s.value * (scale or 1), found * (scale or 1)}
        loc = {"offset": s.offset, "length": s.length, "file": s.file} if s.offset is not None else _loc(info)
        if info is not None:
            loc["tensor"] = info.name
        out.append(model_finding("config_mismatch", f"{s.where()} = {s.value}, but {what} = {found}.",
                                 quantity=q, expected=s.value, found=found, **loc))

    embed = embedding(ckpt) if not by_name.get("model.embed_tokens.weight") else by_name["model.embed_tokens.weight"]
    if embed is not None and len(embed.shape) == 2 and _shape_says(embed):
        check("hidden", embed.shape[1], embed, f"{embed.name!r} has shape {list(embed.shape)}, width")
        check("vocab", embed.shape[0], embed, f"{embed.name!r} has {embed.shape[0]} rows (the vocabulary)")
    layers = {int(m[1]) for n in by_name if (m := _LAYER.match(n))}
    if layers:
        check("layers", max(layers) + 1, None, f"the tensors name layers 0 to {max(layers)}, a count")
        if "layers" in explained:
            explained["layers"] = {max(layers) + 1}
    hd, hidden = _pos_int(hp.get("head_dim")), _pos_int(hp.get("hidden"))
    # DeepSeek's latent attention: a q head is qk_nope_head_dim + qk_rope_head_dim wide (head_dim
    # is the rotary part alone), and there is no k_proj
    nope, rope = _pos_int(hp.get("qk_nope_head_dim")), _pos_int(hp.get("qk_rope_head_dim"))
    q_hd = nope + rope if nope and rope else hd
    for q_name, names, what, width in (("heads", _Q, "heads", q_hd), ("kv_heads", _K, "key/value heads", hd)):
        info = _first(by_name, names)
        if info is None or not width or len(info.shape) != 2 or not _shape_says(info):
            continue
        rows = info.shape[0]
        if rows % width == 0 and (hidden is None or info.shape[1] == hidden):
            check(q_name, rows // width, info, f"{info.name!r} has {rows} rows = {rows // width} {what} of {width}")
    up = _first(by_name, _UP)
    fused = gguf and (hp.model_type or "") == "phi3"  # llama.cpp's Phi-3 ffn_up holds gate and up
    if up is not None and len(up.shape) == 2 and _shape_says(up) and not fused \
            and (hidden is None or up.shape[1] == hidden):
        check("intermediate", up.shape[0], up, f"{up.name!r} has {up.shape[0]} rows")
    experts = {int(m[1]) for n in by_name if (m := _EXPERT.search(n))}
    if experts:
        check("experts", max(experts) + 1, None, f"the tensors name experts 0 to {max(experts)}, a count")
    elif gguf:
        exps = _first(by_name, _EXPS)
        if exps is not None and len(exps.shape) == 3:
            check("experts", exps.shape[0], exps, f"{exps.name!r} stacks {exps.shape[0]} experts")
    return explained, out
