"""onnxruntime as a Side: an ONNX file run with the value behind every aligned point recorded.

The graph is aligned to the named points (align.py: scopes in node names or metadata, weight
identity against the other side's weights, graph position), shape inference types every value,
and the aligned values are added as graph outputs of a copy held in memory (the file is never
written; external data is read from beside it). Graph optimizations are off, so values keep
their names and nodes are not fused away. The inputs are what the export asks for: token ids,
an attention mask of ones, position ids 0..n-1, token type ids of zeros.

onnxruntime returns every output of one `run` at once, so the pass is one step (per_layer False):
compare_runs lets it lead and pulls the other side a layer at a time. Before the run, the
recorded values' size (from the inferred shapes) is checked against the free memory.

Node bytes and initializer bytes come from this project's reader (mx.open: the ONNX protobuf
walked with offsets), so a divergence names the node and the weight with their bytes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..model.config import UnsupportedModel
from .align import NORM_OPS, GraphIndex, align
from .hf_modules import layer_of
from .side import StoredWeights, check_room
from .transformers_side import EngineConfig, generated_ids

INT_INPUTS = {"input_ids", "attention_mask", "position_ids", "token_type_ids"}
ELEM_SIZE = {1: 4, 10: 2, 11: 8, 16: 2}


class OnnxRuntimeSide(StoredWeights):
    """An ONNX file on onnxruntime (see the module docstring). `reference`: the other side of a
    comparison (its points, modules and weights guide the alignment)."""

    per_layer = False
    engine = "onnxruntime"
    gguf = None

    def __init__(self, path, reference: Any = None) -> None:
        import onnx

        self.path = self.label = self._stored = os.fspath(path)
        if not os.path.isfile(self.path):
            raise UnsupportedModel(f"{self.path!r} is not an ONNX file")
        try:
            model = onnx.load(self.path, load_external_data=True)
            model = onnx.shape_inference.infer_shapes(model)
        except Exception as e:  # noqa: BLE001 - a file onnx cannot read is said, not raised raw
            raise UnsupportedModel(f"{self.path!r}: onnx cannot read it ({type(e).__name__}: {e})") from e
        self.proto = model
        self.index = GraphIndex(model.graph)
        expected = reference.points() if reference is not None else None
        weights = reference.named_weights() if hasattr(reference, "named_weights") else None
        modules = getattr(reference, "modules", None)
        self.aligned, self.unaligned = align(self.index, expected, weights, modules)
        layers = [p[0] for p in self.aligned if p[0] is not None]
        ref_cfg = getattr(reference, "config", None)
        self.num_layers = getattr(ref_cfg, "num_layers", None) or ((max(layers) + 1) if layers else 0)
        self.vocab = self._vocab()
        self.has_logits = getattr(reference, "has_logits", None)
        if self.has_logits is None:
            self.has_logits = any("logits" in o for o in self.index.outputs)
        self.config = EngineConfig(f"ONNX ({model.producer_name or 'unknown producer'})", self.num_layers,
                                   None, self.vocab)
        self._session = None

    # -- the run -------------------------------------------------------------------------------

    def points(self):
        return list(self.aligned)

    def _vocab(self) -> int | None:
        for n in self.index.nodes:
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] in self.index.inputs:
                t = self.index.initializers.get(n.input[0])
                if t is not None and len(t.dims) == 2:
                    return int(t.dims[0])
        return None

    def _fixed_length(self) -> int | None:
        shape = self.index.shapes.get("input_ids") or []
        return shape[1] if len(shape) > 1 and isinstance(shape[1], int) and shape[1] > 0 else None

    def _recorded_bytes(self, n: int) -> int:
        total = 0
        for a in self.aligned.values():
            shape = self.index.shapes.get(a.value) or []
            count = 1
            for d in shape:
                count *= d if isinstance(d, int) and d > 0 else n
            total += count * ELEM_SIZE.get(self.index.types.get(a.value, 1), 4)
        return total

    def session(self):
        """An onnxruntime session of the copy with every aligned value an output (made once)."""
        if self._session is None:
            import onnx
            import onnxruntime as ort

            model = onnx.ModelProto()
            model.CopyFrom(self.proto)
            have = {o.name for o in model.graph.output}
            for a in self.aligned.values():
                if a.value not in have:
                    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(a.value))
                    have.add(a.value)
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            opts.log_severity_level = 3
            try:
                self._session = ort.InferenceSession(model.SerializeToString(), opts,
                                                     providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - said with the file's name
                raise UnsupportedModel(f"{self.path!r}: onnxruntime cannot run it ({type(e).__name__}: {e})") from e
        return self._session

    def feeds(self, ids: list[int]) -> dict[str, np.ndarray]:
        """The inputs the export asks for, by name (token ids, mask, positions, token types)."""
        sess = self.session()
        n = len(ids)
        out: dict[str, np.ndarray] = {}
        for inp in sess.get_inputs():
            dtype = np.int32 if "int32" in inp.type else np.int64
            if inp.name == "input_ids" or (inp.name not in INT_INPUTS and not out and "int" in inp.type):
                out[inp.name] = np.asarray([ids], dtype=dtype)
            elif inp.name == "attention_mask":
                out[inp.name] = np.ones((1, n), dtype=dtype)
            elif inp.name == "position_ids":
                out[inp.name] = np.arange(n, dtype=dtype)[None]
            elif inp.name == "token_type_ids":
                out[inp.name] = np.zeros((1, n), dtype=dtype)
            else:
                raise UnsupportedModel(f"{self.path!r} asks for an input {inp.name!r} ({inp.type}) that is "
                                       "not token ids, a mask, positions or token types")
        return out

    def steps(self, ids: list[int], recorder, progress=None, label: str = "tracing"):
        fixed = self._fixed_length()
        if fixed is not None and fixed != len(ids):
            raise ValueError(f"{self.path!r} was exported for exactly {fixed} tokens; give {fixed} ids, not {len(ids)}")
        check_room(self._recorded_bytes(len(ids)), f"recording {len(self.aligned)} values of {self.path!r} "
                                                   f"over {len(ids)} tokens")
        sess = self.session()
        names = [o.name for o in sess.get_outputs()]
        values = dict(zip(names, sess.run(names, self.feeds(ids))))
        for point, a in self.aligned.items():
            x = np.asarray(values.pop(a.value), dtype=np.float32)
            recorder(point[0], point[1], x[0] if x.ndim > 1 and x.shape[0] == 1 else x)
        out = np.asarray(values.get(self.index.outputs[0]) if self.index.outputs[0] in values
                         else sess.run([self.index.outputs[0]], self.feeds(ids))[0], dtype=np.float32)
        if progress:
            progress(label, self.num_layers, self.num_layers)
        yield max(0, self.num_layers - 1)
        return out[0] if out.ndim > 1 and out.shape[0] == 1 else out

    # -- what feeds a point --------------------------------------------------------------------

    def weights(self, point) -> list[str]:
        """The initializers the point's nodes read: matrices first (largest first), then the rest."""
        a = self.aligned.get(point)
        if a is None:
            return []
        made_by = self.index.nodes[a.node] if a.node >= 0 else None
        if point[1] in ("residual", "attn_residual") and (made_by is None or made_by.op_type not in NORM_OPS):
            # a residual add reads no weight: what fed the branch it adds
            return self.weights((point[0], "ffn_out" if point[1] == "residual" else "attn_out"))
        members = [a.node] if made_by is not None and made_by.op_type in NORM_OPS else (a.members or [a.node])
        names = {st for i in members for v in self.index.nodes[i].input if (st := self.index.stored(v))}
        inits = self.index.initializers
        big = [n for n in names if int(np.prod(inits[n].dims or [1])) > 1]
        # what the node making the value reads (through a bias Add: the product before it) first
        direct = set(made_by.input) if made_by is not None else set()
        if made_by is not None and made_by.op_type == "Add":
            for v in made_by.input:
                p = self.index.producer.get(v)
                if p is not None:
                    direct |= set(self.index.nodes[p].input)
        direct = {self.index.stored(v) or v for v in direct}
        return sorted(big, key=lambda n: (n not in direct or len(inits[n].dims) < 2, -len(inits[n].dims),
                                          -int(np.prod(inits[n].dims)), n))

    def node(self, point) -> dict[str, Any] | None:
        """{"node", "op", "attrs", "offset", "length", "epsilon"?, "softmax_axis"?, "casts", "how"}
        of the node making the point's value."""
        from onnx import helper

        a = self.aligned.get(point)
        if a is None or a.node < 0:
            return None
        n = self.index.nodes[a.node]
        out: dict[str, Any] = {"node": n.name or f"#{a.node}", "op": n.op_type, "how": a.how,
                               "attrs": {x.name: _plain(helper.get_attribute_value(x)) for x in n.attribute}}
        out.update(self._node_bytes(a.node))
        members = [self.index.nodes[i] for i in (a.members or [a.node])]
        if point[1] in ("attn_norm", "ffn_norm", "final_norm") or n.op_type in NORM_OPS:
            eps = _epsilon(self.index, [n] if n.op_type in NORM_OPS else members)
            if eps is not None:
                out["epsilon"], out["node_of_epsilon"] = eps
        found = layer_of(a.module) if point[1] == "attn_out" and a.module else None
        if found is not None:  # the attention's Softmax: beside o_proj (Llama), in attention.self (BERT)
            for i in self.index.members(found[1]):
                sm = self.index.nodes[i]
                if sm.op_type == "Softmax":
                    attrs = {x.name: helper.get_attribute_value(x) for x in sm.attribute}
                    rank = len(self.index.shapes.get(sm.input[0]) or [])
                    out["softmax_axis"], out["softmax_last"] = int(attrs.get("axis", -1)), rank - 1
        training = [m.name for m in members if m.op_type == "Dropout" and len(m.input) > 2 and
                    self._constant_true(m.input[2])]
        if training:  # an export of a module left in training mode drops values at random
            out["dropout_training"] = training[0]
        casts = [helper.get_attribute_value(x) for m in members if m.op_type == "Cast" for x in m.attribute
                 if x.name == "to"]
        import onnx

        out["casts"] = [onnx.TensorProto.DataType.Name(c) for c in casts]
        return out

    def _constant_true(self, value: str) -> bool:
        from onnx import numpy_helper

        name = self.index.stored(value)
        if name is None:
            return False
        a = numpy_helper.to_array(self.index.initializers[name])
        return a.size == 1 and bool(a.reshape(-1)[0])

    def _node_bytes(self, i: int) -> dict[str, Any]:
        try:
            st = (self._checkpoint().structures or {}).get(self.path) or next(
                iter((self._checkpoint().structures or {}).values()), None)
        except Exception:  # noqa: BLE001 - the bytes are a courtesy, the run does not need them
            return {}
        main = [r for r in getattr(st, "nodes", []) if r.graph in ("graph", "")]
        if i < len(main):
            return {"offset": int(main[i].at), "length": int(main[i].length)}
        return {}

    def nonfinite_weight(self, point) -> str | None:
        from onnx import numpy_helper

        for name in self.weights(point):
            a = numpy_helper.to_array(self.index.initializers[name])
            if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
                return name
        return None

    # -- tokens --------------------------------------------------------------------------------

    def ids(self, prompt: str | None, ids) -> list[int]:
        if ids is not None:
            if prompt is not None:
                raise ValueError("give either prompt= or ids=, not both")
            return [int(i) for i in ids]
        if prompt is not None:
            raise ValueError(f"{self.path!r} carries no tokenizer: give ids= (or compare it against a folder "
                             "that has one, as side a)")
        return generated_ids(self.vocab, self._fixed_length() or 8)

    def encode(self, text: str) -> list[int] | None:
        return None

    def tokens(self, ids: list[int]) -> list[str]:
        return [str(i) for i in ids]

    def close(self) -> None:
        self._session = None
        self._close_stored()



def _epsilon(index: GraphIndex, members) -> tuple[float, str] | None:
    """The epsilon of a norm among `members`: a norm node's attribute, or the scalar an RMS norm
    written out in ops adds to the mean of squares (Add of a one-value constant)."""
    from onnx import helper, numpy_helper

    for n in members:
        if n.op_type in NORM_OPS:
            for x in n.attribute:
                if x.name == "epsilon":
                    return float(helper.get_attribute_value(x)), n.name
            return 1e-5, n.name  # the operator's default
    for n in members:
        if n.op_type != "Add":
            continue
        for v in n.input:
            t = index.initializers.get(v)
            if t is None and v in index.producer and index.nodes[index.producer[v]].op_type == "Constant":
                c = index.nodes[index.producer[v]]
                t = next((x.t for x in c.attribute if x.name == "value"), None)
            if t is not None and int(np.prod(t.dims or [1])) == 1:
                a = numpy_helper.to_array(t)
                if np.issubdtype(a.dtype, np.floating) and 0 < float(a.reshape(-1)[0]) < 0.1:
                    return float(a.reshape(-1)[0]), n.name
    return None


def _plain(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (int, float, str)) else type(v).__name__
