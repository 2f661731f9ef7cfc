"""The names and layouts transformers gives one weight in its TensorFlow and Flax checkpoints,
mapped to the PyTorch (safetensors) name and layout, so `mx.diff` can compare a tf_model.h5 or a
flax_model.msgpack with the model.safetensors of the same model.

The rules are transformers' own (modeling_tf_pytorch_utils.convert_tf_weight_name_to_pt_weight_name
and modeling_flax_pytorch_utils.load_flax_weights_in_pytorch_model, transformers 4.x; 5.x no
longer ships TensorFlow or Flax): each mapping gives the PyTorch name and the axes permutation
that turns the stored array into the PyTorch one (None: the same layout).
"""

from __future__ import annotations

import re

Axes = tuple[int, ...] | None

_DUPLICATE_SCOPE = re.compile(r"/[^/]*___([^/]*)/")  # 'a___b' stands for 'b' (TF-only renames)
TF_RENAMES = {"kernel": "weight", "embeddings": "weight", "gamma": "weight", "beta": "bias",
              "pointwise_kernel": "pointwise.weight", "depthwise_kernel": "depthwise.weight"}
FLAX_RENAMES = {"kernel": "weight", "scale": "weight", "embedding": "weight"}
CONV2D_TO_PT = (3, 2, 0, 1)  # (h, w, in, out) -> (out, in, h, w)
CONV1D_TO_PT = (2, 1, 0)  # (k, in, out) -> (out, in, k)
FLAX_COLLECTIONS = ("params", "batch_stats")


def reversed_axes(rank: int) -> Axes:
    """numpy's .T: every axis reversed (a 2-D kernel [in, out] becomes [out, in])."""
    return tuple(range(rank - 1, -1, -1)) if rank >= 2 else None


def tf_to_pt(name: str, shape: tuple[int, ...]) -> tuple[str, Axes]:
    """tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0 ->
    (bert.encoder.layer.0.attention.self.query.weight, the transpose)."""
    name = name.replace(":0", "")  # the device id, as transformers drops it
    name = _DUPLICATE_SCOPE.sub(r"/\1/", name)
    name = re.sub(r"//+", "/", name.replace("_._", "/"))
    parts = name.split("/")
    if len(parts) > 1:
        parts = parts[1:]  # the model's own scope (tf_bert_model)
    last = parts[-1]
    if last == "kernel" and len(shape) == 4:
        axes: Axes = CONV2D_TO_PT
    elif last == "kernel" and len(shape) == 3:
        axes = CONV1D_TO_PT
    elif last in ("kernel", "pointwise_kernel", "depthwise_kernel") or "emb_projs" in parts or "out_projs" in parts:
        axes = reversed_axes(len(shape))
    else:
        axes = None
    parts[-1] = TF_RENAMES.get(last, last)
    return ".".join(parts), axes


def flax_to_pt(name: str, shape: tuple[int, ...], pt_names: frozenset[str] | set[str] = frozenset()) -> tuple[str, Axes]:
    """bert/encoder/layer/0/attention/self/query/kernel -> (bert.encoder.layer.0...query.weight,
    the transpose). A kernel the PyTorch side names as it is keeps its layout, as transformers does."""
    parts = name.split("/")
    if len(parts) > 1 and parts[0] in FLAX_COLLECTIONS:
        parts = parts[1:]
    last = parts[-1]
    axes: Axes = None
    if last == "kernel" and ".".join(parts) not in pt_names:
        axes = CONV2D_TO_PT if len(shape) == 4 else reversed_axes(len(shape))
        parts[-1] = "weight"
    elif last in ("scale", "embedding"):
        parts[-1] = "weight"
    elif "mean" in last:  # batch norm statistics (transformers renames any such name)
        parts[-1] = "running_mean"
    elif "var" in last:
        parts[-1] = "running_var"
    return ".".join(parts), axes


def pt_shape(shape: tuple[int, ...], axes: Axes) -> tuple[int, ...]:
    return tuple(shape[i] for i in axes) if axes else tuple(shape)


def match_names(names: list[str], targets: set[str] | dict) -> dict[str, str]:
    """Each of `names` (PyTorch names made from TF or Flax ones) -> the name in `targets` it is,
    allowing for the base model's prefix on one side only (bert.embeddings... against
    embeddings..., as transformers' loaders do)."""
    stripped: dict[str, str | None] = {}
    for t in targets:
        rest = t.split(".", 1)[1] if "." in t else None
        if rest is not None:
            stripped[rest] = None if rest in stripped else t  # None: two targets share it
    out = {}
    for n in names:
        if n in targets:
            out[n] = n
            continue
        rest = n.split(".", 1)[1] if "." in n else None
        if rest is not None and rest in targets:
            out[n] = rest
        elif stripped.get(n):
            out[n] = stripped[n]
    return out
