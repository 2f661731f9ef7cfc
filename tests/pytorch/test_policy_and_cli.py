"""The import policy table, computed import names, and the CLI on torch files."""

from __future__ import annotations

import json

import pytest

import model_explorer as mx
from model_explorer.cli import main
from model_explorer.formats.pytorch.policy import classify


@pytest.mark.parametrize("module,name,severity", [
    ("torch._utils", "_rebuild_tensor_v2", "ok"),
    ("torch", "BFloat16Storage", "ok"),
    ("torch", "float8_e4m3fn", "ok"),
    ("collections", "OrderedDict", "ok"),
    ("numpy.core.multiarray", "_reconstruct", "ok"),
    ("numpy._core.multiarray", "_reconstruct", "ok"),
    ("numpy.dtypes", "Float32DType", "ok"),
    ("copy_reg", "_reconstructor", "ok"),  # Python 2 spelling, mapped
    ("os", "system", "error"),
    ("os.path", "join", "error"),
    ("posix", "system", "error"),
    ("nt", "system", "error"),
    ("subprocess", "Popen", "error"),
    ("builtins", "exec", "error"),
    ("__builtin__", "eval", "error"),  # Python 2 spelling, mapped
    ("builtins", "getattr", "error"),
    ("runpy", "run_path", "error"),
    ("importlib", "import_module", "error"),
    ("marshal", "loads", "error"),
    ("pty", "spawn", "error"),
    ("socket", "socket", "error"),
    ("shutil", "rmtree", "error"),
    ("webbrowser", "open", "error"),
    ("sys", "exit", "error"),
    ("torch", "load", "error"),
    ("torch.hub", "load", "error"),
    ("torch.nn.modules.linear", "Linear", "warning"),
    ("builtins", "print", "warning"),
    ("mypackage", "Thing", "warning"),
])
def test_policy(module, name, severity):
    assert classify(module, name)[0] == severity


def test_computed_import_name_is_an_error(tmp_path):
    """STACK_GLOBAL whose module name is built by a call: flagged as a computed import."""
    payload = (b"\x80\x04coperator\nadd\n\x8c\x01o\x8c\x01s\x86R"  # operator.add('o', 's')
               b"\x8c\x06system\x93\x8c\x04true\x85R.")
    p = tmp_path / "computed.pkl"
    p.write_bytes(payload)
    ckpt = mx.open(p)
    errors = {f.extra["callable"]: f for f in ckpt.errors if f.code == "dangerous_import"}
    assert set(errors) == {"operator.add('o', 's').'system'", "operator.add"}
    assert "computes" in errors["operator.add('o', 's').'system'"].message
    assert not ckpt.warnings


@pytest.mark.reference
def test_cli_info_and_hexdump_on_a_torch_zip(tmp_path, capsys):
    import torch

    p = tmp_path / "m.pt"
    torch.save({"layer.weight": torch.ones(3, 2, dtype=torch.bfloat16)}, p)
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pytorch: 1 file,")
    assert "layer.weight" in out and "BF16" in out and "[3, 2]" in out
    assert main(["info", "--json", str(p)]) == 0
    data = json.loads(capsys.readouterr().out)
    t = data["tensors"][0]
    assert t["stride"] == [2, 1] and t["storage"] == "0" and t["storage_offset"] == 0
    assert main(["doctor", str(p)]) == 0
    assert "no findings" in capsys.readouterr().out
    ckpt = mx.open(p)
    pkl = ckpt.details["files"][str(p)]["pickle"]
    assert main(["hexdump", str(p), "--offset", str(pkl["pickle_offset"]), "--length", "32"]) == 0
    out = capsys.readouterr().out
    assert "data.pkl > op 0 > PROTO = 2" in out
    assert main(["hexdump", str(p), "--offset", "0", "--length", "16"]) == 0
    assert "zip > local header >" in capsys.readouterr().out
