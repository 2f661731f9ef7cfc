"""An OpenVINO IR whose edges run round a loop (issue 40, item 6): OpenVINO's read_model refuses
it; here it is one finding at the bytes of a layer on the loop, and the graph is still listed."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

ov = pytest.importorskip("openvino")

SECOND_INPUT = """
				<port id="3" precision="FP32">
					<dim>1</dim>
					<dim>4</dim>
				</port>
"""


def _cyclic(tmp_path) -> str:
    """x -> Add(x, b) -> Negative -> b: the Add takes the Negative's output (one added edge)."""
    p = ov.opset13.parameter([1, 4], np.float32, name="x")
    b = ov.opset13.negative(ov.opset13.relu(p, name="a"), name="b")
    ov.save_model(ov.Model([ov.opset13.result(b)], [p], "m"), str(tmp_path / "ok.xml"), compress_to_fp16=False)
    xml = (tmp_path / "ok.xml").read_text()
    ov.Core().read_model(str(tmp_path / "ok.xml"))  # the unedited net reads
    head = '<layer id="1" name="a" type="ReLU" version="opset1">'
    assert head in xml
    at = xml.index("</port>", xml.index(head)) + len("</port>")
    xml = xml[:at] + SECOND_INPUT.rstrip() + xml[at:]
    xml = xml.replace(head, head.replace("ReLU", "Add"))
    xml = xml.replace("</edges>", '\t<edge from-layer="2" from-port="1" to-layer="1" to-port="3" />\n\t</edges>')
    path = tmp_path / "cyclic.xml"
    path.write_text(xml)
    return str(path)


def test_a_cycle_in_the_edges_is_a_finding_at_a_layer(tmp_path):
    path = _cyclic(tmp_path)
    with pytest.raises(RuntimeError, match="not in graph"):
        ov.Core().read_model(path)
    ckpt = mx.open(path)
    found = [f for f in ckpt.findings if f.code == "openvino_graph_cycle"]
    assert len(found) == 1 and found[0].severity == "error" and found[0].fix
    assert "found 2 layers" in found[0].message
    raw = open(path, "rb").read()
    assert raw[found[0].offset:].startswith(b'<layer id="1" name="a" type="Add"')
    g = mx.graph(ckpt)
    assert {("a", "b"), ("b", "a")} <= set(zip(g.edges["source"], g.edges["target"]))
