"""A pickle is recognised by its opcodes, whatever it starts with (issue 43): the attack files
that start with UNICODE, GLOBAL, STRING or MARK, that end in garbage, that hide in a zip or tar
member under another name or inside torch.storage._load_from_bytes, and the payload past the
emulation cap, are all called dangerous; text and binary files that are no pickle are not; a
file named like a pickle that is none says why."""

from __future__ import annotations

import io
import os
import pickle
import pickletools

import pytest

import model_explorer as mx
from model_explorer.formats.detect import detect
from model_explorer.formats.detect_pickle import pickle_prefix

from .odd_starts import archive_pickles, odd_start_pickles


def verdict(path) -> str:
    ckpt = mx.open(path)
    verdicts = [d["pickle"]["verdict"] for d in ckpt.details["files"].values() if "pickle" in d]
    return "dangerous" if "dangerous" in verdicts else (verdicts[0] if verdicts else "none")


@pytest.mark.parametrize("name", sorted(odd_start_pickles("m")))
def test_every_start_is_read_as_a_pickle_and_called_dangerous(tmp_path, name):
    marker = tmp_path / "PWNED"
    data = odd_start_pickles(marker)[name]
    assert data[:1] != b"\x80"  # none starts with PROTO
    p = tmp_path / f"{name}.pkl"
    p.write_bytes(data)
    assert detect(data[:512], len(data)) == "pickle"
    ckpt = mx.open(p)
    assert ckpt.format == "pickle"
    assert verdict(p) == "dangerous"
    found = [f for f in ckpt.findings if f.code == "dangerous_import"]
    assert found and all(f.offset is not None and f.offset < len(data) for f in found)
    assert not marker.exists()


def test_the_starts_are_what_the_issue_names():
    starts = {k: v[:4].hex(" ") for k, v in odd_start_pickles("m").items()}
    assert starts["unicode_first"] == "56 6f 73 0a"
    assert starts["global_first_broken"] == "63 62 75 69"
    assert starts["string_first"] == "53 27 6f 73"
    assert starts["mark_first"][:2] == "28"


def test_pickle_load_really_runs_what_the_prefix_imports():
    """The premise: the unpickler imports a GLOBAL before it meets the garbage after it."""
    data = odd_start_pickles("m")["global_first_broken"]
    seen = []

    class Watch(pickle.Unpickler):
        def find_class(self, module, name):
            seen.append((module, name))
            raise pickle.UnpicklingError("stopped here")

    with pytest.raises(pickle.UnpicklingError):
        Watch(io.BytesIO(data)).load()
    assert seen == [("builtins", "exec")]


@pytest.mark.parametrize("name", sorted(archive_pickles("m")))
def test_hidden_pickles_are_found_and_named(tmp_path, name):
    marker = tmp_path / "PWNED"
    p = tmp_path / name
    p.write_bytes(archive_pickles(marker)[name])
    ckpt = mx.open(p)
    assert verdict(p) == "dangerous", [(f.code, f.message) for f in ckpt.findings]
    if name.endswith(".zip"):
        no_pkl = next(f for f in ckpt.findings if f.code == "no_data_pkl")
        assert "are pickles" in no_pkl.message and ("data.txt" in no_pkl.message
                                                    or "weights.bin" in no_pkl.message)
    assert not marker.exists()


def test_a_zip_of_pickles_is_identified_as_weights(tmp_path):
    from model_explorer.formats.detect import WEIGHTS, identify

    data = archive_pickles("m")["wrong_ext.zip"]
    what = identify(lambda o, n: data[o:o + n], len(data))
    assert what.role == WEIGHTS and what.reads_as == "zip"


def test_payload_past_the_emulation_cap_is_still_dangerous(tmp_path, monkeypatch):
    from model_explorer.formats.pytorch import vm

    monkeypatch.setattr(vm, "MAX_OPCODES", 1000)
    filler = b"\x80\x02" + b"N0" * 2000  # 4,000 opcodes of NONE, POP
    for tail in (b"cos\nsystem\nX\x02\x00\x00\x00id\x85R.",  # GLOBAL
                 b"\x8c\x02os\x8c\x06system\x93X\x02\x00\x00\x00id\x85R."):  # STACK_GLOBAL
        p = tmp_path / "long.pkl"
        p.write_bytes(filler + tail)
        assert verdict(p) == "dangerous"
    # memo-fed STACK_GLOBAL past the cap: the names are not followed, so it is a computed import
    p.write_bytes(filler + b"\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93N\x85R.")
    ckpt = mx.open(p)
    found = [f for f in ckpt.findings if f.code == "dangerous_import"]
    assert len(found) == 1 and "computes while loading" in found[0].message
    assert found[0].offset == len(filler) + 18  # the STACK_GLOBAL itself, after 18 bytes of pushes
    assert verdict(p) == "dangerous"


def test_name_that_says_pickle_over_bytes_that_are_not(tmp_path):
    for name, data in (("model.pkl", b"\x00\x01\x02 garbage"),
                       ("model.pt", b"\x89PNG\r\n\x1a\n" + bytes(64))):
        p = tmp_path / name
        p.write_bytes(data)
        ckpt = mx.open(p)
        assert [f.code for f in ckpt.findings] == ["not_a_pickle"]
        assert "opcode" in ckpt.findings[0].message
    other = tmp_path / "blob.dat"
    other.write_bytes(b"\x00\x01\x02 garbage")
    assert [f.code for f in mx.open(other).findings] == ["unknown_format"]


def test_texts_and_real_pickles_of_every_protocol():
    texts = [b"In this repo\n", b"Version 2\nThe model\n", b"NOTICE\n", b"N.B. read me\n",
             b"CTEST_SITE\n" + b"-" * 60 + b"\n.", b"PIL/x.py,sha256=abc,12\n" * 40,
             b"cat\ndog\nbird\n", b"(hello)\n", b"]\n}\n", b"Git v2.31.7 Release Notes\n"]
    for t in texts:
        assert detect(t[:512], len(t)) != "pickle", t
    for proto in range(6):
        for obj in ({"a": [1, 2.5, "x"]}, [None] * 3, ("t", b"b"), {1, 2}):
            data = pickle.dumps(obj, protocol=proto)
            assert detect(data[:512], len(data)) == "pickle", (proto, obj)
            data = pickletools.optimize(data)  # no PUTs: what some writers emit
            assert detect(data[:512], len(data)) == "pickle", (proto, obj)


def test_random_bytes_are_rarely_a_pickle():
    rng = __import__("random").Random(43)
    hits = sum(pickle_prefix(rng.randbytes(512), 4096).is_pickle for _ in range(20000))
    assert hits < 20  # the few that are: "]." and the like, a real pickle of an empty list


def test_prefix_says_why_it_stopped():
    got = pickle_prefix(b"\x00abc", 4)
    assert not got.is_pickle and "opcode" in got.why
    got = pickle_prefix(b"cos\nsystem\n(X>\nf = g", 100)
    assert got.is_pickle and got.imports == 1 and not got.stopped


def test_scanning_never_runs_anything(tmp_path):
    marker = tmp_path / "PWNED"
    for name, data in {**odd_start_pickles(marker), **archive_pickles(marker)}.items():
        p = tmp_path / (name if "." in name else f"{name}.pkl")
        p.write_bytes(data)
        mx.open(p)
    assert not marker.exists()
    assert os.listdir(tmp_path)
