"""Real torch.save files (zip and legacy) read as torch.load(weights_only=True) reads them."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from .helpers import flatten, storage_view, torch_bytes

pytestmark = pytest.mark.reference
KINDS = ("zip", "legacy")


@pytest.fixture(scope="module")
def loaded(torch_files):
    import torch

    return {k: flatten(torch.load(p, weights_only=True)) for k, p in torch_files.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_names_shapes_dtypes_match_torch(torch_files, loaded, kind):
    ckpt = mx.open(torch_files[kind])
    assert ckpt.format == "pytorch"
    assert ckpt.errors == [] and ckpt.warnings == []
    ref = loaded[kind]
    assert list(ckpt.tensors) == list(ref)
    names = {"torch.float32": "F32", "torch.bfloat16": "BF16", "torch.float16": "F16",
             "torch.int64": "I64", "torch.bool": "BOOL", "torch.float64": "F64",
             "torch.int8": "I8", "torch.uint8": "U8", "torch.int32": "I32", "torch.int16": "I16"}
    for name, t in ref.items():
        info = ckpt.tensors[name]
        assert info.shape == tuple(t.shape), name
        assert info.stride == tuple(t.stride()), name
        assert info.storage_offset == t.storage_offset(), name
        assert info.dtype == names[str(t.dtype)], name


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_at_offsets_are_the_values(torch_files, loaded, kind):
    """as_strided over [storage_start, +storage_nbytes) gives torch's values, and
    [offset, +length) is exactly the stretch of the storage the view touches."""
    ckpt = mx.open(torch_files[kind])
    for name, t in loaded[kind].items():
        info = ckpt.tensors[name]
        arr = storage_view(ckpt, info)
        assert np.ascontiguousarray(arr).tobytes() == torch_bytes(t), name
        item = t.element_size()
        assert info.offset == info.extra["storage_start"] + t.storage_offset() * item, name
        if t.numel():
            span = (sum((d - 1) * s for d, s in zip(t.shape, t.stride())) + 1) * item
            assert info.length == span, name
        else:
            assert info.length == 0


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_read_matches_torch(torch_files, loaded, kind):
    """The tensor-data layer's Checkpoint.read works from these fields."""
    ckpt = mx.open(torch_files[kind])
    for name, t in loaded[kind].items():
        got = ckpt.read(name)
        want = t.detach().float().numpy() if t.is_floating_point() else t.numpy()
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want, err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_shared_storage_is_recognised(torch_files, kind):
    ckpt = mx.open(torch_files[kind])
    t = ckpt.tensors
    assert t["model.embed.weight"].storage == t["model.lm_head.weight"].storage
    assert t["model.lm_head.weight"].extra["shared_with"] == ["model.embed.weight"]
    views = {"model.view_offset", "model.view_strided", "model.view_t", "model.base"}
    for name in views:
        assert set(t[name].extra["shared_with"]) == views - {name}
    assert "shared_with" not in t["model.counts"].extra


@pytest.mark.parametrize("kind", KINDS)
def test_nested_structure_and_parameters(torch_files, kind):
    ckpt = mx.open(torch_files[kind])
    assert "optimizer.state.0.exp_avg" in ckpt.tensors
    assert ckpt.tensors["param"].extra["parameter"] is True
    assert ckpt.tensors["param"].extra["requires_grad"] is True
    details = ckpt.details["files"][str(torch_files[kind])]["pickle"]
    assert details["verdict"] == "safe"
    s = details["structure"]
    assert s["epoch"] == 3
    assert s["optimizer"]["param_groups"][0]["lr"] == 0.1
    assert s["model"]["layer.0.weight"] == {"tensor": "model.layer.0.weight", "dtype": "BF16",
                                            "shape": [4, 4]}
    imports = {(i["module"], i["name"]) for i in details["imports"]}
    assert ("torch._utils", "_rebuild_tensor_v2") in imports
    assert all(i["severity"] == "ok" for i in details["imports"])


def test_zip_byteorder_and_records(torch_files):
    ckpt = mx.open(torch_files["zip"])
    assert ckpt.metadata["byteorder"] == "little"
    assert all(t.byteorder == "<" for t in ckpt.tensors.values())
    kinds = {s.kind for s in ckpt.spans}
    assert {"zip_header", "zip_directory", "zip_end", "opcode", "storage", "tensor_data"} <= kinds


def test_legacy_spans_magic_and_sys_info(torch_files):
    ckpt = mx.open(torch_files["legacy"])
    magic = [s for s in ckpt.spans if s.kind == "magic"]
    assert magic and magic[0].offset == 0
    assert [s for s in ckpt.spans if s.kind == "sys_info"]
    assert ckpt.metadata["sys_info"]["little_endian"] is True


def test_opcode_spans_label_every_opcode(torch_files):
    ckpt = mx.open(torch_files["zip"])
    ops = [s for s in ckpt.spans if s.kind == "opcode"]
    assert ops[0].path == "data.pkl > op 0 > PROTO"
    assert any(s.path.endswith("> GLOBAL") and s.value == "torch._utils._rebuild_tensor_v2"
               for s in ops)
    # Opcode spans tile data.pkl with no gap.
    for a, b in zip(ops, ops[1:]):
        assert a.end == b.offset
    pkl = ckpt.details["files"][str(torch_files["zip"])]["pickle"]
    assert ops[0].offset == pkl["pickle_offset"]
    assert ops[-1].end == pkl["pickle_offset"] + pkl["pickle_length"]
    assert len(ops) == pkl["opcode_count"]


@pytest.mark.parametrize("kw", [{}, {"_use_new_zipfile_serialization": False}])
def test_top_level_tensor_and_list(tmp_path, kw):
    import torch

    p = tmp_path / "t.pt"
    torch.save(torch.arange(5.0), p, **kw)
    ckpt = mx.open(p)
    assert list(ckpt.tensors) == ["(root)"]
    assert ckpt.tensors["(root)"].shape == (5,)
    torch.save([torch.ones(1), {"a": torch.zeros(2)}], p, **kw)
    assert list(mx.open(p).tensors) == ["0", "1.a"]


def test_whole_module_names_weights_like_its_state_dict(tmp_path):
    """torch.save(model) pickles the nn.Module; its weights are named as in state_dict()."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    p = tmp_path / "model.pt"
    torch.save(model, p)
    ckpt = mx.open(p)
    assert set(ckpt.tensors) == set(model.state_dict())
    # The module classes are outside the allow-list, built as pickle saves objects: it needs
    # their code (weights_only=True refuses it), a warning naming them, not an attacker's call.
    f = next(f for f in ckpt.findings if f.code == "needs_author_classes")
    assert f.severity == "warning" and "torch.nn.modules.linear.Linear" in f.extra["classes"]
    assert not ckpt.errors
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "needs_classes"


@pytest.mark.parametrize("module", [None, "__main__"])
def test_torch_save_of_a_users_model_needs_its_classes_not_dangerous(tmp_path, module):
    """torch.save(model) of the user's own nn.Module, from a package or from a notebook's
    __main__: "needs_classes", with the classes it would import; never "dangerous"."""
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 3)

    TinyNet.__qualname__ = "TinyNet"  # pickled by module and name, as a module-level class is
    globals()["TinyNet"] = TinyNet
    old = TinyNet.__module__
    if module:
        TinyNet.__module__ = module
    try:
        import sys

        if module:  # pickle checks the class is reachable under that name
            sys.modules[module].TinyNet = TinyNet
        p = tmp_path / "net.pt"
        torch.save(TinyNet(), p)
    finally:
        TinyNet.__module__ = old
    ckpt = mx.open(p)
    assert not ckpt.errors, [str(f) for f in ckpt.errors]
    f = next(f for f in ckpt.findings if f.code == "needs_author_classes")
    assert f"{module or old}.TinyNet" in f.extra["classes"] and f"{module or old}.TinyNet" in f.message
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "needs_classes"
    assert set(ckpt.tensors) == {"proj.weight", "proj.bias"}


def test_more_dtypes(tmp_path):
    import torch

    dts = {torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.uint16: "U16",
           torch.uint32: "U32", torch.uint64: "U64", torch.complex64: "C64",
           torch.complex128: "C128", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
           torch.float8_e5m2fnuz: "F8_E5M2FNUZ"}
    p = tmp_path / "d.pt"
    state = {str(d): torch.tensor([1.0, -0.5, 2.0]).to(d) for d in dts}
    torch.save(state, p)
    ckpt = mx.open(p)
    assert not ckpt.errors
    for d, name in dts.items():
        info = ckpt.tensors[str(d)]
        assert info.dtype == name
        assert ckpt.read_bytes(info.offset, info.length) == torch_bytes(state[str(d)])
        value = state[str(d)]
        expected = value.numpy() if value.is_complex() else value.to(torch.float64).numpy()
        assert np.array_equal(ckpt.read(str(d)), expected), name


def test_bare_storage_is_listed(tmp_path):
    import torch

    p = tmp_path / "s.pt"
    torch.save({"s": torch.UntypedStorage(6)}, p)
    info = mx.open(p).tensors["s"]
    assert (info.dtype, info.shape, info.extra["bare_storage"]) == ("U8", (6,), True)


def test_sharded_bin_index(tmp_path):
    """pytorch_model.bin.index.json goes through the generic shard checks."""
    import json

    import torch

    torch.save({"a": torch.ones(2), "b": torch.zeros(3)}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch.save({"c": torch.ones(4)}, tmp_path / "pytorch_model-00002-of-00002.bin")
    index = {"metadata": {"total_size": 36},
             "weight_map": {"a": "pytorch_model-00001-of-00002.bin",
                            "b": "pytorch_model-00001-of-00002.bin",
                            "c": "pytorch_model-00002-of-00002.bin",
                            "d": "pytorch_model-00002-of-00002.bin"}}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    ckpt = mx.open(tmp_path)
    assert ckpt.format == "pytorch"
    assert set(ckpt.tensors) == {"a", "b", "c"}
    assert [f.code for f in ckpt.errors] == ["missing_tensor"]
    assert ckpt.errors[0].tensor == "d"
    assert not [f for f in ckpt.findings if f.code == "total_size_mismatch"]
