"""LiteRT as a Side: a .tflite file run by ai_edge_litert's Interpreter with every tensor kept
(`experimental_preserve_all_tensors=True`), each operator's output a point. The builtin kernels
are asked for by name (BUILTIN_WITHOUT_DEFAULT_DELEGATES): ai_edge_litert 2.3 still applies its
default XNNPACK delegate when every tensor is kept, and a delegated operator leaves its output
tensor unwritten (stale memory, a different NaN on every run) and adds DELEGATE nodes to the
operator list.

A TFLite file keeps no module scopes, so its points are its operators in execution order: the
k-th operator that computes (a DEQUANTIZE of a stored weight is the weight's preparation, not a
step, and is skipped) is "layer" k, and its output is that layer's `residual` (the decoder's
name for a layer's output). Two TFLite files of one model (a converter's two outputs, or a copy
with a damaged weight) line up operator by operator.

The input is the model's own: an image or a feature array of the input tensor's shape. `ids`
given with exactly that many values are that input; otherwise a fixed generated one (uniform in
[0, 1), seed 0) is used, the same on both sides of a comparison. The output is the model's
first output (no logits: has_logits False).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..model.config import UnsupportedModel
from .side import DEFAULT_PROMPT, StoredWeights, check_room
from .transformers_side import EngineConfig

POINT = "residual"  # each operator's output, as a layer's output


class LiteRTSide(StoredWeights):
    """A .tflite file on LiteRT's interpreter (see the module docstring)."""

    per_layer = False
    engine = "litert"
    gguf = None
    has_logits = False

    def __init__(self, path, reference: Any = None) -> None:
        import warnings

        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self.path = self.label = self._stored = os.fspath(path)
        if not os.path.isfile(self.path):
            raise UnsupportedModel(f"{self.path!r} is not a TFLite file")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # its note that keeping every tensor costs memory
                self.interp = Interpreter(
                    model_path=self.path, experimental_preserve_all_tensors=True,
                    experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
            self.interp.allocate_tensors()
        except Exception as e:  # noqa: BLE001 - a file LiteRT refuses is said, not raised raw
            raise UnsupportedModel(f"{self.path!r}: LiteRT cannot load it ({type(e).__name__}: {e})") from e
        self.tensors = {t["index"]: t for t in self.interp.get_tensor_details()}
        ops = self.interp._get_ops_details()
        made = {int(o["outputs"][0]): o for o in ops if len(o["outputs"])}
        self.weight_of: dict[int, int] = {}  # a DEQUANTIZE's output -> the stored tensor it reads
        self.ops = []
        for o in ops:
            ins = [int(i) for i in o["inputs"] if int(i) >= 0]
            if o["op_name"] == "DEQUANTIZE" and ins and ins[0] not in made:
                self.weight_of[int(o["outputs"][0])] = ins[0]
                continue
            self.ops.append(o)
        self.num_layers = len(self.ops)
        self.input = self.interp.get_input_details()[0]
        self.output = self.interp.get_output_details()[0]
        self.config = EngineConfig(f"TFLite ({len(self.ops)} operators)", self.num_layers, None, None)

    def points(self):
        return [(k, POINT) for k in range(self.num_layers)]

    def _input(self, ids) -> np.ndarray:
        shape = tuple(int(s) for s in self.input["shape"])
        size = int(np.prod(shape))
        dtype = self.input["dtype"]
        if ids is not None and len(ids) == size:
            return np.asarray(ids, dtype=dtype).reshape(shape)
        x = np.random.RandomState(0).rand(*shape)
        return (x * 255).astype(dtype) if np.issubdtype(dtype, np.integer) else x.astype(dtype)

    def steps(self, ids, recorder, progress=None, label: str = "tracing"):
        need = sum(int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize for t in self.tensors.values())
        check_room(need, f"keeping every tensor of {self.path!r}")
        self.interp.set_tensor(self.input["index"], self._input(ids))
        self.interp.invoke()
        for k, o in enumerate(self.ops):
            x = np.asarray(self.interp.get_tensor(int(o["outputs"][0])), dtype=np.float32)
            recorder(k, POINT, np.array(x[0] if x.ndim > 1 and x.shape[0] == 1 else x, copy=True))
        out = np.asarray(self.interp.get_tensor(self.output["index"]), dtype=np.float32)
        if progress:
            progress(label, self.num_layers, self.num_layers)
        yield max(0, self.num_layers - 1)
        return np.array(out[0] if out.ndim > 1 and out.shape[0] == 1 else out, copy=True)

    def weights(self, point) -> list[str]:
        """The stored tensors the operator reads (through a DEQUANTIZE), largest first."""
        layer = point[0]
        if layer is None or not 0 <= layer < len(self.ops):
            return []
        stored = []
        for i in (int(i) for i in self.ops[layer]["inputs"] if int(i) >= 0):
            i = self.weight_of.get(i, i)
            t = self.tensors.get(i)
            if t is not None and i != self.input["index"] and self._is_stored(i):
                stored.append(t)
        stored.sort(key=lambda t: -int(np.prod(t["shape"])))
        return [t["name"] for t in stored]

    def _is_stored(self, i: int) -> bool:
        if not hasattr(self, "_made"):
            self._made = {int(x) for o in self.ops for x in o["outputs"]}
        return i not in self._made and i not in self.weight_of

    def node(self, point) -> dict[str, Any] | None:
        layer = point[0]
        if layer is None or not 0 <= layer < len(self.ops):
            return None
        o = self.ops[layer]
        out_name = self.tensors[int(o["outputs"][0])]["name"]
        return {"node": f"operator {o['index']} ({out_name})", "op": o["op_name"], "how": "position"}

    def nonfinite_weight(self, point) -> str | None:
        return None

    def ids(self, prompt: str | None, ids) -> list[int]:
        if prompt is not None and prompt != DEFAULT_PROMPT:
            raise ValueError(f"{self.path!r} takes an array, not text: give ids= with its values, or nothing")
        return [] if ids is None else list(ids)

    def encode(self, text: str) -> list[int] | None:
        return None

    def tokens(self, ids) -> list[str]:
        return []

    def close(self) -> None:
        self.interp = None
        self._close_stored()

