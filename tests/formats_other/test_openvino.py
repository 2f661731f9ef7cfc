"""OpenVINO IR against openvino itself: plain Consts equal openvino's reading of them, and every
compressed weight equals what openvino computes for its decompression subgraph."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.detect import identify

from . import ov_files as O

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def irs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ov")
    out = O.saved(d)
    out["hand"] = O.hand_patterns(d)
    return out


@pytest.mark.parametrize("which", ["fp32", "fp16", "hand"])
def test_consts_equal_openvinos(irs, which):
    xml = irs[which]
    ckpt = mx.open(str(xml))
    assert ckpt.format == "openvino" and ckpt.errors == [] and ckpt.findings == []
    assert ckpt.files == [str(xml), str(xml.with_suffix(".bin"))]
    want = O.const_data(xml)
    for name, info in ckpt.tensors.items():
        assert info.file == str(xml.with_suffix(".bin"))
        if not info.quant and name in want:
            np.testing.assert_array_equal(ckpt.read(name), want[name].astype(ckpt.read(name).dtype))
    if which == "fp16":
        assert {t.dtype for t in ckpt.tensors.values()} == {"F16"}


def test_hand_built_patterns_equal_openvinos_decompression(irs):
    ckpt = mx.open(str(irs["hand"]))
    kinds = {name: ckpt.tensors[name].label for name in ("w_i8", "w_i4", "w_u8")}
    assert kinds == {"w_i8": "OV_I8", "w_i4": "OV_I4", "w_u8": "OV_U8"}
    for name in kinds:
        want = O.decompressed_by_openvino(irs["hand"], name).astype(np.float32)
        np.testing.assert_array_equal(ckpt.read(name), want.reshape(ckpt.tensors[name].shape))


def test_nncf_compressed_weights_equal_openvinos_decompression(tmp_path):
    pytest.importorskip("nncf")
    xml = O.nncf_int4(tmp_path)
    ckpt = mx.open(str(xml))
    assert ckpt.errors == []
    w0, w2 = ckpt.tensors["self.0.weight"], ckpt.tensors["self.2.weight"]
    assert (w0.label, w0.shape, w2.label) == ("OV_U4", (32, 4, 16), "OV_U8")
    assert w0.quant.parts["zero_point"].dtype == "U4" and w0.quant.round_to == "F16"
    for info in (w0, w2):
        want = O.decompressed_by_openvino(xml, info.name).astype(np.float32)
        np.testing.assert_array_equal(ckpt.read(info.name), want)
    # the compressed weight stays near the float one it came from
    w = O.tiny_torch()[0].weight.detach().numpy().reshape(32, 4, 16)
    assert np.abs(ckpt.read("self.0.weight") - w).max() < 0.02
    b = ckpt.blocks("self.0.weight", start=0, count=4)
    assert b.codes.shape == (4, 16) and b.codes.max() <= 15 and b.zero_point is not None


def test_spans_point_into_both_files(irs):
    ckpt = mx.open(str(irs["fp16"]))
    xml_spans, bin_spans = ckpt.spans_for(str(irs["fp16"])), ckpt.spans_for(str(irs["fp16"].with_suffix(".bin")))
    assert xml_spans[0].path == "net" and all(s.kind == "tensor_data" for s in bin_spans)
    text = irs["fp16"].read_bytes()
    consts = [s for s in xml_spans if s.kind == "tensor_info"]
    assert len(consts) == len(ckpt.tensors)
    for s in consts:
        assert text[s.offset:s.offset + 6] == b"<layer" and text[s.end - 8:s.end] == b"</layer>"
    datas = [s for s in xml_spans if s.path.endswith("> data")]
    assert all(text[s.offset:s.offset + 5] == b"<data" and text[s.end - 2:s.end] == b"/>" for s in datas)


def test_identified_by_content(irs):
    data = irs["fp32"].read_bytes()
    assert identify(lambda o, n: data[o:o + n], len(data)).reads_as == "openvino"


def _ir(tmp_path, xml: str, bin_bytes: bytes | None = b"\0" * 64, name="m"):
    (tmp_path / f"{name}.xml").write_text(xml)
    if bin_bytes is not None:
        (tmp_path / f"{name}.bin").write_bytes(bin_bytes)
    return mx.open(str(tmp_path / f"{name}.xml"))


CONST = ('<layer id="1" name="w" type="Const" version="opset1"><data element_type="f32" shape="{shape}" '
         'offset="{offset}" size="{size}"/></layer>')


def _net(body: str, prefix: str = "") -> str:
    return f'<?xml version="1.0"?>\n{prefix}<net name="t" version="11"><layers>{body}</layers><edges/></net>'


@pytest.mark.parametrize("xml, code", [
    (_net(CONST, '<!DOCTYPE net [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'), "openvino_xml_refused"),
    (_net(CONST, '<!DOCTYPE net SYSTEM "file:///etc/passwd">'), "openvino_xml_refused"),
    (_net("<x>" * 40 + "</x>" * 40), "openvino_xml_refused"),
    (_net(CONST.format(shape="4", offset="0", size="16")).replace("</layers>", "</layer>"), "openvino_bad_xml"),
    (_net(CONST.format(shape="4, 4", offset="0", size="64") + CONST.format(shape="4", offset="60", size="16")
          .replace('id="1"', 'id="2"')), "data_past_end"),
    (_net(CONST.format(shape="4", offset="0", size="12")), "openvino_size_mismatch"),
    (_net(CONST.format(shape="-3", offset="0", size="12")), "openvino_bad_const"),
    (_net(CONST.format(shape="4", offset="x", size="16")), "openvino_bad_const"),
    (_net(CONST.format(shape="4", offset="0", size="16") + CONST.format(shape="4", offset="0", size="16")),
     "openvino_duplicate_layer"),
], ids=["entities", "external", "deep", "malformed", "past_end", "size", "shape", "offset", "duplicate_id"])
def test_hostile_xml_is_a_finding_at_its_bytes(tmp_path, xml, code):
    ckpt = _ir(tmp_path, xml)
    assert code in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    for f in ckpt.findings:
        assert f.offset is not None and 0 <= f.offset <= max(len(xml), 64)


def test_missing_bin_is_an_error(tmp_path):
    ckpt = _ir(tmp_path, _net(CONST.format(shape="4", offset="0", size="16")), bin_bytes=None)
    assert [f.code for f in ckpt.findings] == ["openvino_bin_missing"] and not ckpt.tensors


def test_bad_decompression_shapes_are_refused_not_shown_as_codes(tmp_path):
    body = ('<layer id="1" name="q" type="Const" version="opset1"><data element_type="u8" shape="4, 4" offset="0" size="16"/>'
            '<output><port id="0" precision="U8"/></output></layer>'
            '<layer id="2" name="c" type="Convert" version="opset1"><data destination_type="f32"/></layer>'
            '<layer id="3" name="s" type="Const" version="opset1"><data element_type="f32" shape="3" offset="16" size="12"/></layer>'
            '<layer id="4" name="m" type="Multiply" version="opset1"><output><port id="2" precision="FP32"/></output></layer>')
    xml = _net(body).replace("<edges/>", '<edges><edge from-layer="1" from-port="0" to-layer="2" to-port="0"/>'
                             '<edge from-layer="2" from-port="1" to-layer="4" to-port="0"/>'
                             '<edge from-layer="3" from-port="0" to-layer="4" to-port="1"/></edges>')
    ckpt = _ir(tmp_path, xml)
    assert "openvino_bad_decompression" in {f.code for f in ckpt.findings}
    with pytest.raises(ValueError, match="cannot be dequantized"):
        ckpt.read("q")


def test_a_folder_opens_its_ir_not_the_bin_alone(irs, tmp_path):
    """An optimum-intel export folder: openvino_model.xml + .bin (+ config.json)."""
    import shutil

    shutil.copy(irs["hand"], tmp_path / "openvino_model.xml")
    shutil.copy(irs["hand"].with_suffix(".bin"), tmp_path / "openvino_model.bin")
    ckpt = mx.open(str(tmp_path))
    assert ckpt.format == "openvino" and ckpt.errors == []
    assert ckpt.files == [str(tmp_path / "openvino_model.xml"), str(tmp_path / "openvino_model.bin")]
    assert ckpt.tensors["w_i8"].label == "OV_I8"


def test_a_renamed_const_keeps_its_own_spans(tmp_path):
    """Two Consts named `w`: the second is `w#2`, and the spans of its layer name `w#2`, not `w`."""
    second = CONST.format(shape="4", offset="16", size="16").replace('id="1"', 'id="2"')
    xml = _net(CONST.format(shape="4", offset="0", size="16") + second)
    ckpt = _ir(tmp_path, xml)
    assert set(ckpt.tensors) == {"w", "w#2"}
    spans = [s for f in ckpt.files for s in ckpt.spans_for(f) if s.tensor]
    for name in ("w", "w#2"):
        own = [s for s in spans if s.tensor == name]
        assert {s.kind for s in own} >= {"tensor_info", "tensor_data"}
        layer_at = xml.index('id="1"' if name == "w" else 'id="2"')
        info = next(s for s in own if s.kind == "tensor_info")
        assert info.offset < layer_at < info.end, (name, info)


def test_the_net_is_kept_as_a_structure_record(irs):
    """Every layer with its bytes and its inputs by edge ("layer id:port"), the Parameters as
    inputs, the Results as outputs, the edges: from the one parse."""
    xml = irs["fp32"]
    ckpt = mx.open(str(xml))
    g = ckpt.structures[str(xml)]
    assert g.format == "openvino" and g.file == str(xml)
    raw = xml.read_bytes()
    assert len(g.nodes) == raw.count(b"<layer ") and len(g.edges) == raw.count(b"<edge ")
    for n in g.nodes:
        assert raw[n.at:n.at + 7] == b"<layer " and f'type="{n.op_type}"'.encode() in raw[n.at:n.at + n.length]
    ids = {n.name: raw[n.at:n.at + n.length].split(b'id="')[1].split(b'"')[0].decode() for n in g.nodes}
    fed = {f"{e.src}:{e.src_port}" for e in g.edges}
    assert all(i in fed for n in g.nodes for i in n.inputs)
    assert [v.dtype for v in g.inputs] == ["f32"] and g.inputs[0].shape == ("?", "?")  # dynamic sizes
    assert len(g.outputs) == 1 and any(n.op_type == "Result" for n in g.nodes)
    assert all(ids[n.name] for n in g.nodes)
