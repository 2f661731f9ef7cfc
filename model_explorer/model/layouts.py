"""Which library wrote a checkpoint, and how it is meant to be loaded, from the files beside it.

- sentence-transformers: `modules.json` lists the modules (Transformer, Pooling, Dense, Normalize,
  ...), each in its folder (`1_Pooling/`, `2_Dense/` with its own weights); the Transformer module
  is a transformers model that the library loads with an auto class chosen by its task
  (`AutoModel` for embeddings), not with the head class config.json may name;
- diffusers: a pipeline's `model_index.json` and its component folders (`unet/`, `vae/`,
  `text_encoder/`, ...); a component's `config.json` carries `_class_name` and `_diffusers_version`;
- timm: `config.json` with `architecture` and `pretrained_cfg` (no `model_type`);
- PEFT: `adapter_config.json` (adapters.py checks it);
- GGUF: llama.cpp's converter, a multimodal projector, ComfyUI-GGUF's diffusion models, or a
  tool whose `general.architecture` llama.cpp does not know;
- a plain transformers folder (`config.json` with `model_type`).
The expected-tensor check compares against the class the library loads (will_load.py), and the
layout is one info finding where loading differs from the plain case, and a line on the card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import sources
from ..records import CheckpointRecord, plain_value
from ..spans import Finding
from .findings import model_finding
from .gguf_tables import constants
from .sidefiles import MAX_SIDE_FILE, model_dir, side_json, side_path, side_text

# sentence-transformers: its loader class, and the task its Transformer module loads with
ST_LOADERS = {"SentenceTransformer": ("SentenceTransformer", "feature-extraction"),
              "CrossEncoder": ("CrossEncoder", "sequence-classification"),
              "SparseEncoder": ("SparseEncoder", "fill-mask")}
# sentence-transformers modules that save nothing (their folder may be absent)
NO_FILES = ("Normalize", "Dropout")
AUTO_NAMES = {"feature-extraction": "AutoModel", "sequence-classification": "AutoModelForSequenceClassification",
              "fill-mask": "AutoModelForMaskedLM", "text-generation": "AutoModelForCausalLM"}
# general.architecture values ComfyUI-GGUF writes for diffusion models
DIFFUSION_GGUF = ("flux", "sd1", "sd2", "sdxl", "sd3", "aura", "hidream", "cosmos", "ltxv", "hyvid", "wan",
                  "lumina2", "qwen_image", "chroma", "hunyuan", "mochi")


@dataclass
class Layout:
    """A library's layout: what it is, how it loads, where the evidence sits, and whether it
    is worth a finding (not for a plain transformers folder or a llama.cpp GGUF)."""

    library: str
    what: str
    load: str
    loader: str | None = None  # the transformers auto-class task its loader uses (hf_build.AUTO_CLASSES)
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    parts: list[str] = field(default_factory=list)
    notable: bool = True
    detail: str = ""  # what the cross-check adds (the config class's view)
    pipeline_root: bool = False  # a diffusers pipeline folder: its weights are in the components
    lost: list[str] = field(default_factory=list)  # modules whose folder is not here: loading fails

    def summary(self) -> str:
        parts = f" ({', '.join(self.parts)})" if self.parts else ""
        return f"{self.library}: {self.what}{parts}; load with {self.load}"

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "what": self.what, "load": self.load, "parts": list(self.parts),
                "file": self.file, "summary": self.summary()}


def _json(ckpt: CheckpointRecord, name: str) -> tuple[Any, str | None, int]:
    """(value, path, size) of a small JSON side file; value None when absent or unreadable."""
    text, path, _ = side_text(ckpt, name)
    if text is None:
        return None, path, 0
    try:
        return json.loads(text), path, len(text.encode("utf-8"))
    except (ValueError, RecursionError):
        return None, path, 0


def _config_key(ckpt: CheckpointRecord, key: str) -> dict:
    """file, offset and length of a config.json value (the evidence a layout rests on)."""
    side = side_json(ckpt, "config.json")
    if side is None:
        return {}
    offset, length = side.where(key)
    return {"file": side.path, "offset": offset, "length": length}


def _config(ckpt: CheckpointRecord) -> dict:
    c = ckpt.metadata.get("config.json")
    return c if isinstance(c, dict) else {}


def read_layout(ckpt: CheckpointRecord) -> Layout | None:
    """The layout of the checkpoint's folder (cached with the checkpoint), or None."""
    cache = ckpt.derived.side_files
    if "layout" not in cache:
        found = None
        for recognise in (_gguf, _sentence_transformers, _diffusers, _timm, _peft, _transformers):
            try:
                found = recognise(ckpt)
            except (OSError, ValueError, TypeError, AttributeError):
                found = None
            if found is not None:
                break
        cache["layout"] = found
    return cache["layout"]


def _st_module(ckpt: CheckpointRecord) -> Layout | None:
    """A module's own folder (2_Dense/) of the sentence-transformers model in the folder above."""
    folder = model_dir(ckpt)
    parent = sources.parent_in_repo(folder)
    path = sources.join(parent, "modules.json") if parent else None
    if path is None or not sources.exists(path):
        return None
    text, _ = sources.read_text(path, MAX_SIDE_FILE)
    try:
        modules = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    name = sources.basename(folder.rstrip("/"))
    entry = next((m for m in modules or [] if isinstance(m, dict) and m.get("path") == name), None)
    if entry is None:
        return None
    kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
    return Layout("sentence-transformers", f"the {kind} module's own weights, part of the model in the "
                  "folder above", "sentence_transformers.SentenceTransformer(<the folder above>)", file=path,
                  offset=0, length=len(text.encode("utf-8")))


def _sentence_transformers(ckpt: CheckpointRecord) -> Layout | None:
    modules, path, size = _json(ckpt, "modules.json")
    if modules is None and path is None:
        return _st_module(ckpt)
    if not isinstance(modules, list) or not modules or not all(isinstance(m, dict) for m in modules):
        return None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if "sentence_transformers" not in json.dumps([m.get("type") for m in modules]):
        return None
    st_cfg, _, _ = _json(ckpt, "config_sentence_transformers.json")
    kind = st_cfg.get("model_type") if isinstance(st_cfg, dict) else None
    loader_class, task = ST_LOADERS.get(kind if isinstance(kind, str) else "", ST_LOADERS["SentenceTransformer"])
    if "MLMTransformer" in kinds:
        loader_class, task = "SparseEncoder", "fill-mask"
    bert_cfg, _, _ = _json(ckpt, "sentence_bert_config.json")
    if isinstance(bert_cfg, dict) and bert_cfg.get("transformer_task") in AUTO_NAMES:
        task = bert_cfg["transformer_task"]
    parts, lost = [], []
    for m, k in zip(modules, kinds):
        folder = m.get("path") if isinstance(m.get("path"), str) else ""
        if folder and not sources.exists(sources.join(model_dir(ckpt), folder)):
            (parts if k in NO_FILES else lost).append(f"{k} with no folder (it saves no files)" if k in NO_FILES
                                                      else f"{k} in {folder}/, which is not here")
            continue
        weights = next((w for w in ("model.safetensors", "pytorch_model.bin")
                        if folder and side_path(ckpt, f"{folder}/{w}") is not None), None)
        where = "this folder" if not folder else f"{folder}/" + (f" with its own {weights}" if weights else "")
        parts.append(f"{k} in {where}")
    transformer_here = any(k in ("Transformer", "MLMTransformer") and not m.get("path")
                           for m, k in zip(modules, kinds))
    load = f"sentence_transformers.{loader_class}(path)"
    if transformer_here:
        load += (f"; transformers' {AUTO_NAMES[task]}.from_pretrained(path) loads the Transformer module's "
                 "model alone")
    return Layout("sentence-transformers", f"a {loader_class} of {len(modules)} module(s)", load,
                  loader=task if transformer_here else None, file=path, offset=0, length=size, parts=parts,
                  lost=lost)


def _diffusers(ckpt: CheckpointRecord) -> Layout | None:
    index, path, size = _json(ckpt, "model_index.json")
    if isinstance(index, dict) and isinstance(index.get("_class_name"), str):
        folder = model_dir(ckpt)
        parts = [f"{name}/ ({spec[1]})" for name, spec in index.items()
                 if not name.startswith("_") and isinstance(spec, list) and len(spec) == 2
                 and isinstance(spec[1], str) and sources.exists(sources.join(folder, name))]
        return Layout("diffusers", f"a {index['_class_name']} pipeline; the weights are in its component "
                      "folders, each opened by its own path", "diffusers.DiffusionPipeline.from_pretrained(path)",
                      file=path, offset=0, length=size, parts=parts, pipeline_root=not ckpt.tensors)
    cfg = _config(ckpt)
    cls = cfg.get("_class_name")
    if isinstance(cls, str) and "_diffusers_version" in cfg:
        parent = sources.parent_in_repo(model_dir(ckpt))
        above = parent is not None and sources.exists(sources.join(parent, "model_index.json"))
        return Layout("diffusers", f"a {cls} model" + (", a component of the pipeline in the folder above"
                                                       if above else ""),
                      f"diffusers.{cls}.from_pretrained(path)", **_config_key(ckpt, "_class_name"))
    return None


def _timm(ckpt: CheckpointRecord) -> Layout | None:
    cfg = _config(ckpt)
    arch = cfg.get("architecture")
    if not isinstance(arch, str) or not isinstance(cfg.get("pretrained_cfg"), dict) or "model_type" in cfg:
        return None
    classes = cfg.get("num_classes")
    what = f"a timm {arch}" + (f" with {classes} classes" if isinstance(classes, int) else "")
    weights = sources.basename(ckpt.files[0]) if ckpt.files else "model.safetensors"
    return Layout("timm", what, f"timm.create_model({arch!r}, pretrained=True, pretrained_cfg_overlay="
                  f"dict(file='path/{weights}')), or 'hf-hub:' and the repository's name; transformers' "
                  "TimmWrapperModel loads it too when timm is installed", **_config_key(ckpt, "architecture"))


def _peft(ckpt: CheckpointRecord) -> Layout | None:
    cfg, path, _ = _json(ckpt, "adapter_config.json")
    if not isinstance(cfg, dict):
        return None
    base = cfg.get("base_model_name_or_path")
    kind = cfg.get("peft_type") or "an"
    return Layout("peft", f"{kind} adapter" + (f" for {base}" if isinstance(base, str) and base else ""),
                  "peft.PeftModel.from_pretrained(base_model, path)", file=path, notable=False)


def _transformers(ckpt: CheckpointRecord) -> Layout | None:
    cfg = _config(ckpt)
    if not isinstance(cfg.get("model_type"), str):
        return None
    classes = cfg.get("architectures")
    cls = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else "AutoModel"
    return Layout("transformers", f"a {cfg['model_type']} model", f"transformers.{cls}.from_pretrained(path)",
                  file=side_path(ckpt, "config.json"), notable=False)


def _gguf(ckpt: CheckpointRecord) -> Layout | None:
    if ckpt.format != "gguf":
        return None
    arch = plain_value(ckpt.metadata.get("general.architecture"))
    arch = arch if isinstance(arch, str) else None
    llama_cpp = "llama.cpp (llama-cli -m path), llama-cpp-python's Llama(model_path=path)"
    if arch == "clip":
        return Layout("llama.cpp", "a multimodal projector (mmproj) for a vision-language model",
                      "llama.cpp's llama-mtmd-cli -m <the language model>.gguf --mmproj path", notable=False)
    if arch in DIFFUSION_GGUF:
        return Layout("ComfyUI-GGUF", f"a {arch} diffusion model (general.architecture {arch!r}), "
                      "which llama.cpp does not run", "ComfyUI's Unet Loader (GGUF) node, or diffusers' "
                      "GGUFQuantizationConfig")
    if arch is not None and _llama_cpp_knows(arch):
        # llama.cpp's converter and llama-quantize always write these two; other writers may not
        marks = [k for k in ("general.file_type", "general.quantization_version") if k not in ckpt.metadata]
        writer = "llama.cpp" if not marks else "a GGUF writer other than llama.cpp's converter"
        what = f"a {arch} model in GGUF" + (f" (no {' or '.join(marks)}), which llama.cpp loads" if marks else "")
        return Layout(writer, what, llama_cpp, notable=False)
    said = f"general.architecture {arch!r}" if arch else "no general.architecture"
    return Layout("another GGUF writer", f"a GGUF with {said}, an architecture llama.cpp does not "
                  "know; its tensors read as usual", "the tool that wrote it (llama.cpp will not load it)")


def _llama_cpp_knows(arch: str) -> bool:
    gguf = constants()
    if gguf is None:
        return True  # nothing to say it does not
    return arch in set(gguf.MODEL_ARCH_NAMES.values())


def findings(ckpt: CheckpointRecord, layout: Layout | None) -> list[Finding]:
    """One info finding for a library whose loading differs from a plain transformers folder or
    a llama.cpp GGUF; what the cross-check learned (`detail`) is part of its message."""
    if layout is None or not layout.notable:
        return []
    if layout.file is None and ckpt.format == "gguf":
        from .hparams import read_hparams

        arch = read_hparams(ckpt).values.get("architecture")
        if arch is not None:
            layout.file, layout.offset, layout.length = arch.file, arch.offset, arch.length
    parts = f" ({'; '.join(layout.parts)})" if layout.parts else ""
    text = f"Written by {layout.library}: {layout.what}{parts}. Load it with {layout.load}."
    if layout.detail:
        text += " " + layout.detail
    out = [model_finding("library_layout", text, file=layout.file, offset=layout.offset,
                         length=layout.length, library=layout.library, load=layout.load)]
    if layout.lost:
        out.append(model_finding("library_module_missing", f"{layout.library}'s module list names "
                                 f"{len(layout.lost)} module(s) whose folder is not here: {'; '.join(layout.lost)}. "
                                 f"{layout.load.split(';')[0]} fails when it reaches them.", file=layout.file,
                                 offset=layout.offset, length=layout.length, modules=list(layout.lost)))
    return out


__all__ = ["Layout", "findings", "read_layout"]
