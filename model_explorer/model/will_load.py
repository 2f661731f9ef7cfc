"""Will it load: the checkpoint's tensors against the ones its architecture expects, by the rules
transformers loads with (load_rules.py).

Mismatches are explained, not listed: a wrapper's prefix on every key (DDP's `module.`,
torch.compile's `_orig_mod.`, a PEFT wrapper's `base_model.model.`) is one finding with its count;
a base checkpoint under a head class names the head tensors that will be initialised at random
(transformers adds `base_model_prefix` itself), a head checkpoint loaded as the base model says
the head is dropped, buffers older versions saved are named as such; an output projection
missing while the config does not tie it, a weight stored transposed, and a hyperparameter the
shapes contradict each get their own cause and fix. What is left over is reported the way
transformers reports it at load: missing, unexpected, shape-mismatched. Only headers are read.
"""

from __future__ import annotations

import re
from collections import Counter

from ..records import CheckpointRecord, TensorInfo
from ..spans import Finding
from . import expected as exp_mod
from . import families, layouts, load_findings
from . import load_rules as rules_mod
from .findings import model_finding
from .hparam_shapes import ANY_LAYER, natural, quantities, quantized, shape_says, tensor_loc
from .hparams import HParams, Sourced
from .sidefiles import side_path

# prefix -> (what leaves it, how to strip it)
KNOWN_PREFIXES = {
    "module.": "torch DistributedDataParallel / DataParallel (the wrapper's state_dict was saved)",
    "_orig_mod.": "torch.compile (the compiled wrapper's state_dict was saved)",
    "base_model.model.": "a PEFT wrapper saved as a full model (merge_and_unload() before saving)",
    "model.": "a wrapper module around the model (its attribute name became part of every key)",
}
LIST_SHOWN = load_findings.LIST_SHOWN
_short = load_findings.short


def expected_for(ckpt: CheckpointRecord, hp: HParams, cross_check: bool = False, loader: str | None = None
                 ) -> tuple[exp_mod.Expected | None, list[Finding]]:
    """The expected tensors and any info finding about where they came from.

    At open (`cross_check=False`) only the built-in family tables are used: they need no torch,
    so opening never waits seconds for it. `cross_check=True` (doctor, the Model tab, repairs,
    `ckpt.cross_check()`) builds the architecture with transformers on the meta device when it is
    installed, and falls back to the tables when it is not or cannot build the config.
    `loader`: the auto class a library loads the model with (layouts.py; "auto" is AutoModel)
    instead of the class config.json names."""
    notes: list[Finding] = []
    # The tables list layers up to the count the tensors show (+1), never a header's bare number.
    shown = {int(m[1]) for n in ckpt.tensors if (m := ANY_LAYER.search(n))}
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
        from . import hf_build

        try:
            e = hf_build.from_transformers(cfg, loader)
        except hf_build.NotBuildable as why:
            notes.append(model_finding("unknown_architecture", f"{why}; the built-in checks ran instead.",
                                       **_kv_loc(hp.values.get("model_type") or hp.values.get("architecture"))))
    if e is None:
        e = exp_mod.builtin(hp, config=cfg, max_layers=cap)
        if e is not None and loader in ("auto", "feature-extraction"):
            e = exp_mod.as_base(e)
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


# -- wrapper prefixes ------------------------------------------------------------------------------

def find_prefix(actual: list[str], want: set[str], base: str | None = None) -> tuple[str, str, int] | None:
    """("strip", prefix, count) when stripping a wrapper's prefix makes most unmatched keys match.
    The model's own `base_model_prefix` is not a wrapper (transformers strips it at load), unless
    it is doubled ("model.model.")."""
    unmatched = [n for n in actual if n not in want]
    if not want or len(unmatched) < max(1, len(actual) // 2):
        return None
    candidates = list(KNOWN_PREFIXES)
    firsts = Counter(n.split(".", 1)[0] + "." for n in unmatched if "." in n)
    candidates += [p for p, _ in firsts.most_common(3) if p not in candidates]
    best = None
    for p in candidates:
        if base and p == base + "." and not any(n.startswith(p + p) for n in unmatched):
            continue
        count = sum(1 for n in unmatched if n.startswith(p) and n[len(p):] in want)
        if count and (best is None or count > best[2]):
            best = ("strip", p, count)
    if best is None or best[2] < max(1, len(unmatched) // 2):
        return None
    return best


def _renamed(name: str, how: tuple[str, str, int] | None, want: set[str]) -> str:
    if how is None or name in want:
        return name
    _, p, _ = how
    if name.startswith(p) and name[len(p):] in want:
        return name[len(p):]
    return name


def _is_adapter(ckpt: CheckpointRecord) -> bool:
    return side_path(ckpt, "adapter_config.json") is not None


# -- the comparison --------------------------------------------------------------------------------

def check(ckpt: CheckpointRecord, hp: HParams, cross_check: bool = False) -> list[Finding]:
    """Findings for the checkpoint's tensors against what its architecture expects
    (`cross_check`: against transformers' build of it, see `expected_for`), after the library
    layout's own finding (layouts.py): the layout says which class it is meant to load with."""
    layout = layouts.read_layout(ckpt)
    if layout is not None:
        layout.detail = ""
    found = _check(ckpt, hp, cross_check, layout)
    return layouts.findings(ckpt, layout) + found


def load_sets(ckpt: CheckpointRecord, loader: str | None = None) -> tuple[set[str], set[str]]:
    """(missing, unexpected) as `from_pretrained(path, output_loading_info=True)` reports them for
    config.json's class (`loader` None) or an auto class ("auto": AutoModel), from the stored
    names alone and transformers' build of the class (the rules the findings come from)."""
    from . import hf_build

    e = hf_build.from_transformers(ckpt.metadata.get("config.json"), loader)
    rep = rules_mod.report(e.load_rules(), list(ckpt.tensors))
    return set(rep.missing), set(rep.unexpected)


def _check(ckpt: CheckpointRecord, hp: HParams, cross_check: bool, layout) -> list[Finding]:
    if not ckpt.tensors or _is_adapter(ckpt) or not hp.describes_model:
        return []
    out: list[Finding] = []
    loader = layout.loader if layout is not None else None
    e, notes = expected_for(ckpt, hp, cross_check, loader)
    out += notes
    actual_names = list(ckpt.tensors)
    rules = e.load_rules() if e is not None else None
    want = (set(e.shapes) | set(rules.keys)) if e is not None else set()
    how = find_prefix(actual_names, want, rules.prefix) if rules is not None else None
    if how is not None:
        loads = not rules_mod.report(rules, actual_names).missing - {e.head}
        out.append(_prefix_finding(ckpt, how, len(actual_names), rules.class_name if loads else None))
    # the checkpoint naming the model's tables use -> the checkpoint's TensorInfo
    by_name: dict[str, TensorInfo] = {}
    for n in actual_names:
        by_name.setdefault(_renamed(n, how, want), ckpt.tensors[n])
    for alias, name in (e.aliases.items() if e is not None else ()):
        if alias in by_name and name not in by_name:  # a name transformers also loads it from
            by_name[name] = by_name.pop(alias)
    canon = load_findings.canonical(by_name, e)
    explained, mismatches = quantities(ckpt, hp, canon)
    out += mismatches
    if e is None:
        return out
    out += _compare(ckpt, hp, e, by_name, canon, explained)
    if layout is not None and cross_check and loader:
        layout.detail = load_findings.config_class_view(ckpt, hp, by_name, e)
    return out


def _prefix_finding(ckpt: CheckpointRecord, how: tuple[str, str, int], total: int,
                    loads_with: str | None) -> Finding:
    _, p, count = how
    names = [n for n in ckpt.tensors if n.startswith(p)]
    first = next((n for n in names if n.startswith(p + p)), names[0])
    info = ckpt.tensors[first]
    doubled = first.startswith(p + p)
    cause = ("the model was saved from inside a wrapper that also names its child "
             f"{p.rstrip('.')!r} ({(p + p)!r})" if doubled
             else KNOWN_PREFIXES.get(p, "a wrapper module around the model"))
    if loads_with:  # transformers strips the model's own prefix once: the head class loads it
        return model_finding("key_prefix_doubled", f"{count:,} of {total:,} tensor names start with "
                             f"{(p + p)!r}: saved from {cause}. transformers' {loads_with} strips one {p!r} "
                             "and loads them, but its base model class, and tools that read the names as "
                             "they are (converters, other runtimes), find every tensor missing.",
                             prefix=p, count=count, how="strip", **tensor_loc(info))
    return model_finding("key_prefix", f"{count:,} of {total:,} tensor names start with {p!r}, which the "
                         f"model's own names lack (e.g. {first!r}): saved from {cause}. Every one of them "
                         "would load as missing plus unexpected.", prefix=p, count=count, how="strip",
                         **tensor_loc(info))


def _compare(ckpt: CheckpointRecord, hp: HParams, e: exp_mod.Expected, by_name: dict[str, TensorInfo],
             canon: dict[str, TensorInfo], explained: dict[str, set[int]]) -> list[Finding]:
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
    quant = quantized(ckpt, canon)
    modules = {n.rsplit(".", 1)[0] for n in canon} if quant else set()
    expected_modules = {n.rsplit(".", 1)[0] for n in e.shapes} if quant else set()

    def quant_part(n: str) -> bool:
        parts = n.split(".")
        return any(".".join(parts[:k]) in expected_modules for k in range(len(parts) - 1, 0, -1))

    rules = e.load_rules()
    rep = rules_mod.report(rules, by_name)
    base_ckpt = bool(rep.added) and not rep.stripped and not e.base  # no prefix under a head class
    # missing, in checkpoint naming
    absent = load_findings.absent(e, rep, canon)
    head_new = sorted((n for n in absent if base_ckpt and rules.prefix and not n.startswith(rules.prefix + ".")),
                      key=natural)
    if e.base and rep.stripped:  # a head checkpoint as the base model: modules only the base class has
        tops = {n.split(".", 1)[0] for n in canon}
        head_new = [n for n in absent if n.split(".", 1)[0] not in tops]
    missing = [n for n in absent if n not in head_new and n != e.head
               and not (quant and n.rsplit(".", 1)[0] in modules)
               and not (bad_layers and beyond(n, n_layers))]
    head_missing = (e.head is not None and e.head in absent and e.head not in head_new
                    and hp.origin == "config.json" and not e.tied.get(e.head) and tied_cfg is not True)
    # unexpected, by what explains them
    extra = [] if not e.complete else [
        stored for name, stored in sorted(rep.unexpected.items())
        if stored not in e.shapes and not e.is_ignored_unexpected(stored) and not e.is_ignored_unexpected(name)
        and not (quant and quant_part(stored)) and not (bad_layers and beyond(stored, hp.get("layers")))
        and not (stored == "lm_head.weight" and e.head is None)]
    stale = [n for n in extra if load_findings.stale_buffer(n, by_name[n])]
    dropped = [n for n in extra if n not in stale and e.base and rep.stripped]
    unused = [n for n in extra if n not in stale and n not in dropped and base_ckpt]
    extra = [n for n in extra if n not in stale and n not in dropped and n not in unused]
    if head_new:
        out.append(load_findings.head_initialised(e, head_new, unused, by_name, len(rep.added) or None))
    if dropped:
        out.append(load_findings.head_dropped(e, dropped, by_name))
    if stale:
        out.append(load_findings.stale(e, stale, by_name))
    wanted = {n: e.shapes.get(n) for n in missing}
    if head_missing and e.head in e.shapes:
        wanted[e.head] = e.shapes[e.head]
    # {stored name: expected name} when the names are one module renamed in every layer, each
    # keeping its role, and the renamed checkpoint loads with nothing missing
    renames = load_findings.safe_renames(wanted, extra, by_name, rules)
    renamed = " " + _renamed_text(renames) if renames else ""
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
                                 f"are not in the checkpoint: {_short(missing)}.{renamed}", missing=missing,
                                 source=e.source, **({"renames": renames} if renames else {})))
    elif renames:  # only the head was renamed
        out.append(model_finding("missing_tensors", f"{e.head!r} is not in the checkpoint, but "
                                 f"{_short([k for k, v in renames.items() if v == e.head])} has its shape."
                                 f"{renamed}", missing=[e.head], source=e.source, renames=renames,
                                 tensor=e.head))
    # A GGUF none of whose names llama.cpp knows is not a model of its architecture (a test or
    # scratch file of tensors): there is no model to compare with.
    overlap = any(n in e.shapes or (e.known is not None and e.known.match(n)) for n in by_name)
    if hp.origin == "gguf" and not overlap:
        return []
    if extra:
        out.append(model_finding("unexpected_tensors", f"{len(extra):,} tensor(s) are not part of "
                                 f"{e.source}: {_short(extra)}; a loader ignores them.{renamed}",
                                 unexpected=extra, source=e.source, **tensor_loc(by_name[extra[0]]),
                                 **({"renames": renames} if renames else {})))
    out += _shapes(hp, e, canon, explained)
    return out


def _shapes(hp: HParams, e: exp_mod.Expected, canon: dict[str, TensorInfo],
            explained: dict[str, set[int]]) -> list[Finding]:
    out, odd = [], []
    skip_values = set().union(*(v for q, v in explained.items() if q != "layers"))
    for name, want in e.shapes.items():
        info = canon.get(name)
        if info is None or want is None or not shape_says(info):
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
                                     found=list(have), **tensor_loc(info)))
            continue
        if set(want) & skip_values and len(have) == len(want):
            continue  # a config_mismatch already explains it
        odd.append((info, want, have))
    for info, want, have in odd[:LIST_SHOWN]:
        out.append(model_finding("shape_mismatch", f"{info.name!r} has shape {list(have)}; {e.source} "
                                 f"expects {list(want)}.", expected=list(want), found=list(have), **tensor_loc(info)))
    if len(odd) > LIST_SHOWN:
        rest = odd[LIST_SHOWN:]
        out.append(model_finding("shape_mismatch", f"{len(rest):,} more tensor(s) differ in shape from "
                                 f"{e.source}: {_short([i.name for i, _, _ in rest])}.",
                                 tensors=[i.name for i, _, _ in rest]))
    return out


def _renamed_text(renames: dict[str, str]) -> str:
    pairs = {}
    for old, new in renames.items():  # one line per pattern, not per layer
        pairs.setdefault((re.sub(r"\.\d+\.", ".N.", old), re.sub(r"\.\d+\.", ".N.", new)), 0)
    shown = "; ".join(f"{a} -> {b}" for a, b in list(pairs)[:4])
    return (f"The names are one module renamed: {shown} ({len(renames)} tensor(s), each keeping its "
            "role and shape, and the renamed checkpoint loads with nothing missing). mx.repair(src, dest) "
            "writes a copy with the expected names.")
