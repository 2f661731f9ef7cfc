"""Hostile pickles are flagged by name and never run, whatever opens them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import model_explorer as mx
from model_explorer.cli import main

from .helpers import Reducer, hostile_pickles, touch_command, zip_with_data_pkl

CALLABLES = {
    "os_system_p0": "os.system",
    "os_system_p2": "posix.system",
    "builtins_exec": "builtins.exec",
    "builtins_eval_p0": "builtins.eval",
    "subprocess_call": "subprocess.call",
    "runpy": "runpy._run_code",
    "memo_stack_global": "os.system",
}


@pytest.fixture
def hostile(tmp_path):
    marker = tmp_path / "marker"
    files = {}
    for name, data in hostile_pickles(marker).items():
        p = tmp_path / f"{name}.pkl"
        p.write_bytes(data)
        files[name] = p
    return marker, files


def dangerous(ckpt):
    return [f for f in ckpt.findings if f.code == "dangerous_import"]


def test_the_payloads_are_real(tmp_path):
    """Proof that the markers mean something: unpickled for real (in a child process), two of
    the payloads do create the marker. No test below ever lets that happen."""
    marker = tmp_path / "proof"
    data = hostile_pickles(marker)
    for name in ("os_system_p2", "memo_stack_global"):
        code = "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"
        subprocess.run([sys.executable, "-c", code], input=data[name], check=True)
        assert marker.exists(), name
        marker.unlink()


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_each_hostile_pickle_is_flagged_by_name(hostile, name):
    marker, files = hostile
    ckpt = mx.open(files[name])
    assert ckpt.format == "pickle"
    found = dangerous(ckpt)
    assert found, name
    f = found[0]
    assert f.severity == "error"
    assert f.extra["callable"] == CALLABLES[name]
    assert CALLABLES[name] in f.message
    assert f.offset is not None and 0 <= f.offset < files[name].stat().st_size
    pkl = ckpt.details["files"][str(files[name])]["pickle"]
    assert pkl["verdict"] == "dangerous"
    assert any(i["severity"] == "error" and i["offset"] == f.offset for i in pkl["imports"])
    assert not marker.exists()


def test_message_names_the_constant_arguments(hostile):
    marker, files = hostile
    for name in ("os_system_p0", "os_system_p2", "memo_stack_global"):
        f = dangerous(mx.open(files[name]))[0]
        assert f"system({touch_command(marker)!r})" in f.message, f.message
    f = dangerous(mx.open(files["subprocess_call"]))[0]
    assert f"subprocess.call(['touch', {str(marker)!r}])" in f.message


def test_memo_obfuscated_stack_global_points_at_the_import(hostile):
    _, files = hostile
    data = files["memo_stack_global"].read_bytes()
    f = dangerous(mx.open(files["memo_stack_global"]))[0]
    assert data[f.offset:f.offset + 1] == b"\x93"  # the STACK_GLOBAL opcode itself
    ckpt = mx.open(files["memo_stack_global"])
    span = [s for s in ckpt.spans if s.kind == "opcode" and s.offset == f.offset]
    assert span and span[0].path.endswith("STACK_GLOBAL")


def test_protocol_0_text_pickle_is_detected_and_read(hostile):
    _, files = hostile
    ckpt = mx.open(files["os_system_p0"])
    ops = [s.path.rsplit(" > ", 1)[-1] for s in ckpt.spans if s.kind == "opcode"]
    assert ops == ["GLOBAL", "MARK", "STRING", "TUPLE", "REDUCE", "STOP"]


def test_getattr_chain_credits_the_import(tmp_path):
    """getattr(__import__('os'), 'system')('...'): both builtins flagged, the call shown."""
    marker = tmp_path / "m"
    payload = (b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\nX\x02\x00\x00\x00os\x85R"
               b"X\x06\x00\x00\x00system\x86R" + b"X" + len(f"touch {marker}").to_bytes(4, "little")
               + f"touch {marker}".encode() + b"\x85R.")
    p = tmp_path / "g.pkl"
    p.write_bytes(payload)
    ckpt = mx.open(p)
    names = {f.extra["callable"] for f in dangerous(ckpt)}
    assert names == {"builtins.getattr", "builtins.__import__"}
    getattr_finding = [f for f in dangerous(ckpt) if f.extra["callable"] == "builtins.getattr"][0]
    assert "builtins.getattr(builtins.__import__('os'), 'system')" in getattr_finding.message
    assert not marker.exists()


@pytest.mark.reference
@pytest.mark.parametrize("legacy", [False, True])
def test_hostile_object_inside_a_valid_torch_checkpoint(tmp_path, legacy):
    import torch

    marker = tmp_path / "marker"
    p = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "evil": Reducer(os.system, (touch_command(marker),))}, p,
               _use_new_zipfile_serialization=not legacy)
    ckpt = mx.open(p)
    assert ckpt.format == "pytorch"
    assert list(ckpt.tensors) == ["w"]  # the tensors still list
    assert [f.extra["callable"] for f in dangerous(ckpt)] == ["posix.system"]
    assert main(["doctor", str(p)]) == 1
    # The tensor APIs work on such a file, and run nothing either.
    assert ckpt.read("w").tolist() == [1.0, 1.0]
    ckpt.stats("w")
    assert len(ckpt.stats_table()) == 1
    assert not marker.exists()


@pytest.mark.reference
def test_hostile_data_pkl_swapped_into_a_torch_zip(tmp_path):
    import torch

    marker = tmp_path / "marker"
    valid = tmp_path / "valid.pt"
    torch.save({"w": torch.ones(2)}, valid)
    evil = tmp_path / "evil.pt"
    zip_with_data_pkl(valid, hostile_pickles(marker)["subprocess_call"], evil)
    ckpt = mx.open(evil)
    assert ckpt.format == "pytorch"
    assert [f.extra["callable"] for f in dangerous(ckpt)] == ["subprocess.call"]
    assert not marker.exists()


def test_cli_never_runs_the_payload(hostile, capsys):
    marker, files = hostile
    for name, p in files.items():
        assert main(["doctor", str(p)]) == 1, name
        out = capsys.readouterr().out
        assert CALLABLES[name] in out
        assert main(["info", str(p)]) == 1, name  # the doctor's exit codes, a danger banner first
        assert capsys.readouterr().out.splitlines()[1].startswith("!! DANGER")
        assert main(["hexdump", str(p), "--length", "64"]) == 0
        assert main(["doctor", "--json", str(p)]) == 1
    capsys.readouterr()
    assert not marker.exists()


def test_cli_subprocess_once(hostile):
    marker, files = hostile
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    for cmd in ("doctor", "info", "hexdump"):
        r = subprocess.run([sys.executable, "-m", "model_explorer.cli", cmd,
                            str(files["os_system_p2"])], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == (0 if cmd == "hexdump" else 1), r.stderr
    assert "posix.system" in subprocess.run(
        [sys.executable, "-m", "model_explorer.cli", "doctor", str(files["os_system_p2"])],
        capture_output=True, text=True, env=env, timeout=60).stdout
    assert not marker.exists()


def test_safe_plain_pickle_is_safe(tmp_path):
    import collections
    import pickle

    p = tmp_path / "ok.pkl"
    p.write_bytes(pickle.dumps({"a": [1, 2.5, "x"], "b": collections.OrderedDict(c=(1, 2)),
                                "s": {1, 2}, "bytes": b"\x00" * 10}, protocol=4))
    ckpt = mx.open(p)
    assert not ckpt.errors and not ckpt.warnings
    pkl = ckpt.details["files"][str(p)]["pickle"]
    assert pkl["verdict"] == "safe"
    assert pkl["structure"]["a"] == [1, 2.5, "x"]
    assert pkl["structure"]["b"] == {"c": [1, 2]}


def test_unknown_class_the_pickle_builds_needs_the_authors_code(tmp_path):
    """NEWOBJ + BUILD of a class outside the allow-list (how torch.save(model) stores the model's
    own classes): loading imports the author's module, but calls no function of the file's
    choosing. Its own verdict and warning, naming what would be imported."""
    p = tmp_path / "u.pkl"
    p.write_bytes(b"\x80\x02cmypackage.models\nNet\nq\x00)\x81q\x01}q\x02X\x01\x00\x00\x00aK\x01sb.")
    ckpt = mx.open(p)
    assert not ckpt.errors
    assert [f.code for f in ckpt.warnings] == ["needs_author_classes"]
    f = ckpt.warnings[0]
    assert "mypackage.models.Net" in f.message and "weights_only=True" in f.message and f.fix
    assert f.extra["classes"] == ["mypackage.models.Net"] and f.offset == 2
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "needs_classes"


def test_unknown_function_the_pickle_calls_is_dangerous(tmp_path):
    """REDUCE of a module-level name outside the allow-list: a call of the file's choosing."""
    p = tmp_path / "u.pkl"
    p.write_bytes(b"\x80\x02cmypackage.helpers\ndo_thing\nq\x00X\x01\x00\x00\x00a\x85q\x01Rq\x02.")
    ckpt = mx.open(p)
    assert [f.code for f in ckpt.errors] == ["unlisted_call"]
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "dangerous"


def test_denied_class_built_with_newobj_stays_dangerous(tmp_path):
    p = tmp_path / "u.pkl"
    p.write_bytes(b"\x80\x02csubprocess\nPopen\nq\x00)\x81q\x01.")
    ckpt = mx.open(p)
    assert ckpt.errors and ckpt.details["files"][str(p)]["pickle"]["verdict"] == "dangerous"


@pytest.mark.parametrize("name", ["len", "abs", "max", "sum", "isinstance"])
def test_pure_builtins_called_are_safe(tmp_path, name):
    # fickling's safe-builtins case: builtins.len([1, 2, 3])
    import pickletools  # noqa: F401 - the bytes are written by hand, as an attacker would

    p = tmp_path / "b.pkl"
    arg = b"]q\x01(K\x01K\x02K\x03e" if name != "isinstance" else b"K\x01cbuiltins\nint\nq\x03"
    p.write_bytes(b"\x80\x02cbuiltins\n" + name.encode() + b"\nq\x00" + arg +
                  (b"\x85" if name != "isinstance" else b"\x86") + b"q\x02Rq\x04.")
    ckpt = mx.open(p)
    assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.findings]
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "safe"


@pytest.mark.parametrize("name", ["getattr", "eval", "map", "iter"])
def test_builtins_that_reach_or_call_stay_out(tmp_path, name):
    p = tmp_path / "b.pkl"
    p.write_bytes(b"\x80\x02cbuiltins\n" + name.encode() + b"\nq\x00]q\x01\x85q\x02Rq\x03.")
    verdict = mx.open(p).details["files"][str(p)]["pickle"]["verdict"]
    assert verdict == "dangerous", verdict


def test_unknown_class_only_referenced_is_a_warning(tmp_path):
    p = tmp_path / "u.pkl"
    p.write_bytes(b"\x80\x02}X\x03\x00\x00\x00clscmypackage.models\nNet\ns.")
    ckpt = mx.open(p)
    assert [f.code for f in ckpt.warnings] == ["unknown_import"] and not ckpt.errors
    assert "mypackage.models.Net" in ckpt.warnings[0].message
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "suspicious"


def test_second_pickle_after_stop_is_read_too(tmp_path):
    """A benign pickle followed by a hostile one: flagged as several pickles and dangerous."""
    import pickle

    marker = tmp_path / "m"
    p = tmp_path / "two.pkl"
    p.write_bytes(pickle.dumps({"ok": 1}, protocol=2) + hostile_pickles(marker)["os_system_p2"])
    ckpt = mx.open(p)
    codes = {f.code for f in ckpt.findings}
    assert {"several_pickles", "dangerous_import"} <= codes
    assert not marker.exists()
