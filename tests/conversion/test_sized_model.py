"""The real-size generator's GPTQ folder (conversion/sized_model.py) is what GPTQ's libraries
write and read: its layout, and the weights it implies decoded three ways that must agree: our
codec (`ckpt.read`), GPTQ's own dequantization formula written out below in numpy, and the
logits of transformers' Llama holding those weights against ours. Written at the TINY shape."""

from __future__ import annotations

import json

import numpy as np
import pytest
from quant_codec.test_demo import demo_helpers  # tests/runtime/conftest.py's transformers helpers
from safetensors import safe_open

import model_explorer as mx
from model_explorer.conversion import sized_model as big

F32 = np.float32
IDS = [1, 72, 101, 108, 3, 200, 17, 5, 99, 45, 4000, 12]


def parts(folder) -> dict[str, np.ndarray]:
    """Every stored tensor of the folder, as the safetensors library reads it."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for file in sorted(set(index["weight_map"].values())):
        with safe_open(str(folder / file), framework="numpy") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    assert set(out) == set(index["weight_map"])
    return out


def autogptq_dequant(qweight, qzeros, scales, g_idx, bits) -> tuple[np.ndarray, np.ndarray]:
    """AutoGPTQ's QuantLinear dequantization (checkpoint_format "gptq": each stored zero plus
    one), in numpy: (float32 [out, in], the fp16 weight AutoGPTQ computes in half precision)."""
    groups, out_f = scales.shape
    maxq = (1 << bits) - 1
    if 32 % bits == 0:  # AutoGPTQ's wf shifts: field k of each word at bits k*bits..
        wf = np.arange(0, 32, bits, dtype=np.uint32)
        z = (qzeros.view(np.uint32)[:, :, None] >> wf[None, None, :]) & maxq
        w = (qweight.view(np.uint32)[:, None, :] >> wf[None, :, None]) & maxq
        z, w = z.reshape(groups, -1), w.reshape(-1, out_f)
    else:  # 3 bits: one little-endian bit stream down each qweight column (along each qzeros row)
        weights = np.arange(bits, dtype=np.int64)
        one = np.arange(32, dtype=np.uint32)
        wb = ((qweight.view(np.uint32)[:, None, :] >> one[None, :, None]) & 1).reshape(-1, bits, out_f)
        w = (wb.astype(np.int64) << weights[None, :, None]).sum(1)
        zb = ((qzeros.view(np.uint32)[:, :, None] >> one[None, None, :]) & 1).reshape(groups, -1)
        zb = zb[:, :len(zb[0]) // bits * bits].reshape(groups, -1, bits)
        z = (zb.astype(np.int64) << weights[None, None, :]).sum(2)
    z = z.astype(np.int64)[:, :out_f] + 1
    q = w.astype(np.int64) - z[g_idx]  # [in, out]
    exact = (scales.astype(F32)[g_idx] * q.astype(F32)).T
    half = (scales[g_idx] * q.astype(np.float16)).T
    return exact, half


CONFIGS = [(4, 128, False), (4, 32, True), (8, -1, False), (3, 64, False), (2, 128, True)]


@pytest.mark.parametrize("bits,group,act_order", CONFIGS)
def test_gptq_folder_decodes_as_gptq_does(tmp_path, bits, group, act_order):
    folder = tmp_path / "gptq"
    big.write_gptq_folder(str(folder), big.TINY, bits=bits, group_size=group, desc_act=act_order,
                          shard_bytes=1 << 20)
    stored = parts(folder)
    ckpt = mx.open(str(folder))
    bad = [f for f in ckpt.findings if f.severity in ("error", "warning")]
    assert not bad, [f.message for f in bad]
    for i in range(big.TINY.layers):
        for _, name, (out_f, in_f) in big.TINY.matrices(i):
            base = name.removesuffix(".weight")
            qw, qz, sc, gi = (stored[f"{base}.{k}"] for k in ("qweight", "qzeros", "scales", "g_idx"))
            groups = 1 if group == -1 else in_f // group
            assert (qw.dtype, qw.shape) == (np.int32, (in_f * bits // 32, out_f))
            assert (qz.dtype, qz.shape) == (np.int32, (groups, -(-out_f * bits // 32)))
            assert (sc.dtype, sc.shape) == (np.float16, (groups, out_f))
            assert (gi.dtype, gi.shape) == (np.int32, (in_f,))
            assert np.array_equal(np.bincount(gi), np.full(groups, in_f // groups))
            assert act_order or np.array_equal(gi, np.arange(in_f) // (in_f // groups))
            exact, half = autogptq_dequant(qw, qz, sc, gi, bits)
            assert np.isfinite(exact).all() and 0.01 < np.abs(exact).max() < 0.2
            ours = ckpt.read(name)
            assert ckpt.tensors[name].label == f"GPTQ_Q{bits}"
            np.testing.assert_array_equal(ours, exact)
            np.testing.assert_array_equal(ours.astype(np.float16), half)
    assert {stored[n].dtype for n in stored if not n.endswith(("qweight", "qzeros", "scales", "g_idx"))} \
        == {np.dtype(np.float16)}
    assert len({f.name for f in folder.glob("model-*.safetensors")}) > 1  # sharded, with its index
    config = json.loads((folder / "config.json").read_text())
    q = config["quantization_config"]
    assert (q["quant_method"], q["bits"], q["group_size"], q["desc_act"], q["sym"]) == \
        ("gptq", bits, group, act_order, True)
    assert config["torch_dtype"] == "float16"


@pytest.mark.reference
def test_gptq_folder_runs_as_transformers_llama(tmp_path):
    """load_model / trace of the folder give the logits of transformers' Llama holding the weights
    GPTQ's formula decodes, in memory and streamed."""
    pytest.importorskip("transformers")
    folder = tmp_path / "gptq"
    big.write_gptq_folder(str(folder), big.TINY, group_size=64, desc_act=True)
    stored = parts(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("quantization_config")
    cfg["torch_dtype"] = "float32"  # the reference runs the decoded weights in float32, as we do
    state = {}
    for name, a in stored.items():
        if name.endswith(".qweight"):
            base = name.removesuffix(".qweight")
            state[base + ".weight"], _ = autogptq_dequant(
                a, *(stored[f"{base}.{k}"] for k in ("qzeros", "scales", "g_idx")), 4)
        elif a.dtype == np.float16 and not name.endswith(".scales"):
            state[name] = a.astype(F32)
    h = demo_helpers()
    ref = h.reference_logits(h.hf_model_from(cfg, state), IDS)
    model = mx.load_model(str(folder), device="cpu", stream=False)
    assert h.rel_error(model.forward(IDS), ref) < 1e-4
    streamed = mx.load_model(str(folder), device="cpu", stream=True)
    a, b = streamed.forward(IDS), model.forward(IDS)
    # the same decoded weights; BLAS sums a block of rows in another order than the whole matrix
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max() and (a.argmax(-1) == b.argmax(-1)).all()
    trace = mx.trace(str(folder), ids=IDS)
    assert repr(trace).startswith(f"<Trace llama {big.TINY.layers} layers, {len(IDS)} tokens")


def test_pack_fields_is_autogptqs_packing():
    """Fields k at bits k*bits.. of one stream (3-bit fields span words), checked on known words."""
    assert big.pack_fields([1, 2, 3, 4, 5, 6, 7, 8], 4).tolist() == [np.int32(np.uint32(0x87654321).view(np.int32))]
    assert big.pack_fields(np.full(8, 7), 4).tolist() == [0x77777777]
    three = big.pack_fields(np.arange(32) % 8, 3).view(np.uint32)
    stream = sum(int(v) << (3 * k) for k, v in enumerate(np.arange(32) % 8))
    assert [int(w) for w in three] == [(stream >> (32 * k)) & 0xFFFFFFFF for k in range(3)]


def test_gptq_folder_refuses_shapes_it_cannot_pack(tmp_path):
    with pytest.raises(ValueError, match="group_size 100"):
        big.write_gptq_folder(str(tmp_path / "g"), big.TINY, group_size=100)
    with pytest.raises(ValueError, match="2, 3, 4 or 8"):
        big.write_gptq_folder(str(tmp_path / "b"), big.TINY, bits=5)


def test_gptq_folder_bytes_is_what_is_written(tmp_path):
    """The benchmark checks the disk's room with it before writing 5.5 GB for the 8B shape."""
    big.write_gptq_folder(str(tmp_path), big.TINY, group_size=64)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == big.gptq_folder_bytes(big.TINY, group_size=64)
    assert 5.4e9 < big.gptq_folder_bytes(big.LLAMA_8B) < 5.9e9


def test_gguf_runs_in_llama_cpp(tmp_path):
    """llama.cpp refuses a GGUF without tokenizer.ggml.model; with "none" it runs the token ids,
    and its logits are ours within its activation rounding (it multiplies Q4_K blocks by
    activations rounded to 8 bits)."""
    path = big.write_gguf(str(tmp_path / "tiny.gguf"), big.TINY)
    ckpt = mx.open(path)
    assert ckpt.metadata["tokenizer.ggml.model"].value == "none"
    assert not [f for f in ckpt.findings if f.severity != "info"]
    from model_explorer.runtime.engines import llamacpp_binding

    if llamacpp_binding.find() is None:
        pytest.skip("no llama.cpp binding loads here")
    theirs = mx.load_model(path, backend="llama.cpp", context=32).forward(IDS)
    ours = mx.load_model(path, device="cpu").forward(IDS)
    assert theirs.shape == ours.shape == (len(IDS), big.TINY.vocab)
    assert demo_helpers().rel_error(theirs, ours) < 0.02  # 0.004 measured
