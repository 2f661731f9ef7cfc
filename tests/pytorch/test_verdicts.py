"""Verdicts by what a pickle does: every callable it invokes outside the allow-list is an
error, whatever its name; frames are read the way the loader reads them. No payload ever
runs: each would create a marker file, and none appears."""

from __future__ import annotations

import argparse
import io
import pickle
import subprocess
import sys

import pytest

import model_explorer as mx
from model_explorer.cli import main

from .gadgets import AUTHOR_CLASS_PICKLES, REAL, frame_straddle, gadget_pickles, nested_frames
from .helpers import zip_with_data_pkl


def verdict(ckpt, path) -> str:
    return ckpt.details["files"][str(path)]["pickle"]["verdict"]


def codes(ckpt) -> set[str]:
    return {f.code for f in ckpt.findings}


def run_child(code: str, data: bytes) -> None:
    subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=300)


def test_the_gadgets_are_real(tmp_path):
    """Proof that the markers mean something: loaded for real in a child process, each of these
    payloads creates the marker. No other test lets that happen."""
    marker = tmp_path / "proof"
    for name in REAL:
        run_child("import pickle,sys; pickle.loads(sys.stdin.buffer.read())",
                  gadget_pickles(marker)[name])
        assert marker.exists(), name
        marker.unlink()
    for build in (frame_straddle, nested_frames):
        data = build(marker)
        assert pickle.loads(data) != 0 and not marker.exists()  # read straight through: harmless
        run_child("import io,pickle,sys; pickle.load(io.BytesIO(sys.stdin.buffer.read()))", data)
        assert marker.exists(), build.__name__  # read from a BytesIO, as torch.load does: it runs
        marker.unlink()


@pytest.fixture(scope="module")
def gadget_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gadgets")
    marker = d / "marker"
    files = {}
    for name, data in gadget_pickles(marker).items():
        files[name] = d / f"{name}.pkl"
        files[name].write_bytes(data)
    yield marker, files
    assert not marker.exists()


@pytest.mark.parametrize("name", sorted(gadget_pickles("m")))
def test_every_gadget_is_dangerous(gadget_files, name):
    marker, files = gadget_files
    ckpt = mx.open(files[name])
    assert verdict(ckpt, files[name]) == "dangerous", [str(f) for f in ckpt.findings]
    assert codes(ckpt) & {"dangerous_import", "unlisted_call"}
    assert not marker.exists()


def test_cli_exits_1_on_every_gadget(gadget_files, capsys):
    marker, files = gadget_files
    for name, p in files.items():
        assert main(["doctor", str(p)]) == 1, name
        assert main(["doctor", "--json", str(p)]) == 1, name
    capsys.readouterr()
    assert not marker.exists()


@pytest.mark.parametrize("name,callable_", [
    ("eval_call", "builtins.eval.__call__"), ("glob_os_system", "glob.os.system"),
    ("pydoc_locate", "pydoc.locate"), ("methodcaller", "operator.methodcaller"),
])
def test_dotted_and_attribute_names_are_named_with_their_arguments(gadget_files, name, callable_):
    _, files = gadget_files
    ckpt = mx.open(files[name])
    found = [f for f in ckpt.errors if f.extra.get("callable") == callable_]
    assert found and "calls" in found[0].message, [str(f) for f in ckpt.findings]


def test_an_unknown_call_is_an_error_a_reference_a_warning(gadget_files, tmp_path):
    _, files = gadget_files
    called = mx.open(files["unknown_call"])
    assert [f.code for f in called.errors] == ["unlisted_call"]
    assert "mypackage.tools.cleanup(" in called.errors[0].message
    p = tmp_path / "ref.pkl"
    p.write_bytes(b"\x80\x02]cmypackage.tools\ncleanup\na.")  # [mypackage.tools.cleanup]
    referenced = mx.open(p)
    assert not referenced.errors and [f.code for f in referenced.warnings] == ["unknown_import"]
    assert verdict(referenced, p) == "suspicious"


@pytest.mark.parametrize("name", sorted(AUTHOR_CLASS_PICKLES))
def test_a_class_only_built_as_pickle_saves_objects_needs_the_authors_code(tmp_path, capsys, name):
    # NEWOBJ + BUILD on the instance (or protocol 0's reconstructor on object): the shape
    # torch.save(model) writes for the model's classes
    p = tmp_path / f"{name}.pkl"
    p.write_bytes(AUTHOR_CLASS_PICKLES[name])
    ckpt = mx.open(p)
    assert not ckpt.errors and [f.code for f in ckpt.warnings] == ["needs_author_classes"]
    assert ckpt.warnings[0].extra["classes"] == ["somepkg.mod.Thing"]
    assert verdict(ckpt, p) == "needs_classes"
    assert main(["doctor", str(p)]) == 0 and main(["doctor", "--strict", str(p)]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("name", ["inst_unknown", "obj_unknown", "build_on_class", "reconstructor_base_init"])
def test_every_way_of_invoking_a_class_counts(gadget_files, name):
    _, files = gadget_files
    ckpt = mx.open(files[name])
    assert any(f.code == "unlisted_call" and f.extra["callable"] == "somepkg.mod.Thing"
               for f in ckpt.errors), [str(f) for f in ckpt.findings]


def test_tolerated_classes_stay_warnings(tmp_path):
    p = tmp_path / "ns.pkl"
    p.write_bytes(pickle.dumps({"args": argparse.Namespace(lr=0.1)}, protocol=2))
    ckpt = mx.open(p)
    # built as pickle saves objects: weights_only=True refuses it, nothing is called
    assert not ckpt.errors and verdict(ckpt, p) == "needs_classes"


def test_frame_straddle_is_read_as_the_loader_reads_it(tmp_path):
    marker = tmp_path / "marker"
    p = tmp_path / "straddle.pkl"
    p.write_bytes(frame_straddle(marker))
    ckpt = mx.open(p)
    assert {"pickle_frame_overrun", "pickle_frame_differential", "dangerous_import"} <= codes(ckpt)
    hidden = [f for f in ckpt.errors if f.code == "dangerous_import"]
    assert hidden[0].extra["callable"] == "os.system" and str(marker) in hidden[0].message
    assert p.read_bytes()[hidden[0].offset:hidden[0].offset + 1] == b"c"  # the GLOBAL opcode
    assert verdict(ckpt, p) == "dangerous"
    assert main(["doctor", str(p)]) == 1
    assert not marker.exists()


def test_nested_frames(tmp_path):
    marker = tmp_path / "marker"
    p = tmp_path / "nested.pkl"
    p.write_bytes(nested_frames(marker))
    ckpt = mx.open(p)
    assert {"pickle_frame_nested", "pickle_frame_differential", "dangerous_import"} <= codes(ckpt)
    assert verdict(ckpt, p) == "dangerous"
    assert not marker.exists()


def test_frame_past_the_end(tmp_path):
    p = tmp_path / "long_frame.pkl"
    p.write_bytes(b"\x80\x04\x95" + (1000).to_bytes(8, "little") + b"N.")
    assert "pickle_frame_past_end" in codes(mx.open(p))


def test_regular_frames_raise_nothing(tmp_path):
    p = tmp_path / "framed.pkl"
    p.write_bytes(pickle.dumps({f"k{i}": [i, str(i) * 50, b"x" * 300] for i in range(3000)},
                               protocol=5))
    assert pickle.loads(p.read_bytes())  # a real multi-frame pickle
    ckpt = mx.open(p)
    assert not ckpt.errors and not ckpt.warnings and verdict(ckpt, p) == "safe"


@pytest.mark.reference
@pytest.mark.slow
def test_frame_straddle_in_a_torch_zip_runs_under_torch_load(tmp_path):
    """torch.load(weights_only=False) reads data.pkl from a BytesIO: proof that it runs the
    hidden call (in a child), then the same file is flagged here."""
    import torch

    marker = tmp_path / "marker"
    valid = tmp_path / "valid.pt"
    torch.save({"w": torch.ones(2)}, valid)
    evil = tmp_path / "evil.pt"
    zip_with_data_pkl(valid, frame_straddle(marker), evil)
    ckpt = mx.open(evil)
    assert "pickle_frame_differential" in codes(ckpt)
    assert verdict(ckpt, evil) == "dangerous"
    assert not marker.exists()
    run_child(f"import torch; torch.load({str(evil)!r}, weights_only=False)", b"")
    assert marker.exists()


def test_loader_reading_matches_cpython_on_plain_pickles():
    """The emulated loader reading yields the same opcodes as genops on honest pickles."""
    import pickletools

    from model_explorer.formats.pytorch.frames import LoaderReading

    data = pickle.dumps({"a": [1, 2.5, "x" * 70_000, b"y" * 90_000], "b": ("z",) * 9}, protocol=5)
    straight = [(op.name, pos) for op, _, pos in pickletools.genops(data)]
    reading = LoaderReading(io.BytesIO(data))
    loader = []
    for op, arg, pos in pickletools.genops(reading):
        loader.append((op.name, pos))
        if op.name == "FRAME":
            reading.load_frame(arg)
        reading.at_op = True
    assert loader == straight
