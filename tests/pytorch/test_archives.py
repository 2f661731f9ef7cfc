"""Models inside archives (issue 39 item 5): a wheel, a zipped folder, a TorchServe .mar and a NeMo
.nemo tar are recognised as archives of models, not as broken torch checkpoints; the models inside
are listed, each opens in place by its path inside the archive (`pkg.whl!/pkg/model.pt`), a stored
one as a byte range of the archive and a deflated one inflated within limits, and every pickle
inside is judged (a hostile .pt in a wheel makes the wheel dangerous), at the archive's bytes."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import model_explorer as mx  # noqa: E402
from model_explorer.formats.detect import identify  # noqa: E402

from .helpers import hostile_pickles, tar_of, zip_with_data_pkl  # noqa: E402


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _hostile_pt(tmp_path, marker) -> bytes:
    valid = tmp_path / "valid.pt"
    valid.write_bytes(_saved({"w": torch.ones(2)}))
    out = tmp_path / "hostile.pt"
    zip_with_data_pkl(valid, hostile_pickles(marker)["os_system_p0"], out)
    return out.read_bytes()


def _identify(path) -> str:
    data = path.read_bytes()
    return identify(lambda o, n: data[o:o + n], len(data)).kind


WEIGHTS = {"enc": torch.arange(12, dtype=torch.float32).reshape(3, 4), "dec": torch.full((5,), 2.0)}


@pytest.fixture
def wheel(tmp_path):
    """Three .pt files (two stored, one deflated) and a safetensors file under pkg/models/."""
    from safetensors.torch import save

    path = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/models/a.pt", _saved(WEIGHTS))
        z.writestr("pkg/models/b.pt", _saved({"state_dict": WEIGHTS}))
        z.writestr("pkg/models/c.pt", _saved(WEIGHTS), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("pkg/models/d.safetensors", save(WEIGHTS), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("pkg-1.0.dist-info/RECORD", "")
    return path


def test_a_wheel_of_models_is_an_archive_not_a_broken_checkpoint(wheel):
    assert _identify(wheel) == "model_archive"  # not "PyTorch export archive" (its models/ folder)
    ckpt = mx.open(wheel)
    codes = {f.code for f in ckpt.findings}
    assert ckpt.format == "archive" and "no_data_pkl" not in codes and "extension_mismatch" not in codes
    listed = ckpt.details["files"][str(wheel)]["archive"]["models"]
    assert [r["member"] for r in listed] == ["pkg/models/a.pt", "pkg/models/b.pt", "pkg/models/c.pt",
                                            "pkg/models/d.safetensors"]
    assert [r["stored"] for r in listed] == [True, True, False, False]
    assert {r["verdict"] for r in listed[:3]} == {"safe"}
    note = next(f for f in ckpt.findings if f.code == "archive_models")
    assert "4 model file(s)" in note.message and f"{wheel}!/pkg/models/a.pt" in note.message


@pytest.mark.parametrize("member", ["pkg/models/a.pt", "pkg/models/c.pt", "pkg/models/d.safetensors"])
def test_each_member_opens_in_place(wheel, member):
    path = f"{wheel}!/{member}"
    with mx.open(path) as ckpt:
        assert ckpt.source == path and ckpt.files == [path]
        names = sorted(ckpt.tensors)
        assert names == ["dec", "enc"]
        assert np.array_equal(ckpt.read("enc"), WEIGHTS["enc"].numpy())
        src = ckpt.sources.get(path)
        if member.endswith("a.pt"):  # stored: a byte range of the archive, nothing copied
            with zipfile.ZipFile(wheel) as z:
                inner = z.read(member)
            assert wheel.read_bytes()[src.start:src.start + src.size] == inner
        else:
            assert src.start is None  # deflated: inflated in memory


def test_the_stored_members_bytes_are_labelled_in_the_archive(wheel):
    ckpt = mx.open(wheel)
    row = ckpt.details["files"][str(wheel)]["archive"]["models"][0]
    spans = [s for s in ckpt.spans if s.path.startswith("pkg/models/a.pt > ")]
    assert spans and all(row["offset"] <= s.offset < row["offset"] + row["bytes"] for s in spans)


def test_a_hostile_pt_in_a_wheel_makes_the_wheel_dangerous(tmp_path, wheel):
    marker = tmp_path / "PWNED"
    evil = _hostile_pt(tmp_path, marker)
    path = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        dst.writestr("pkg/models/e.pt", evil)
    ckpt = mx.open(path)
    assert ckpt.details["files"][str(path)]["pickle"]["verdict"] == "dangerous"
    found = next(f for f in ckpt.findings if f.code == "dangerous_import")
    assert found.message.startswith("pkg/models/e.pt: ") and found.file == str(path)
    assert path.read_bytes()[found.offset:found.offset + 1] == b"c"  # the GLOBAL, in the archive
    row = next(r for r in ckpt.details["files"][str(path)]["archive"]["models"] if r["member"].endswith("e.pt"))
    assert row["verdict"] == "dangerous" and row["imports"]
    assert mx.open(f"{path}!/pkg/models/e.pt").details["pickle"]["verdict"] == "dangerous"
    audit = mx.audit([str(path)], workers=0, progress=False).models.set_index("source")
    assert audit.loc[f"{path}!/pkg/models/e.pt", "pickle_verdict"] == "dangerous"
    assert audit.loc[f"{path}!/pkg/models/a.pt", "pickle_verdict"] == "safe"
    assert audit.loc[str(path), "pickle_verdict"] == "dangerous"
    assert not marker.exists()


def test_a_hidden_pickle_beside_the_models_is_judged(tmp_path, wheel):
    marker = tmp_path / "PWNED"
    path = tmp_path / "hidden.zip"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        dst.writestr("pkg/data.txt", hostile_pickles(marker)["os_system_p2"], compress_type=zipfile.ZIP_DEFLATED)
    ckpt = mx.open(path)
    assert ckpt.format == "archive"
    assert ckpt.details["files"][str(path)]["pickle"]["verdict"] == "dangerous"
    found = next(f for f in ckpt.findings if f.code == "dangerous_import")
    assert "pkg/data.txt" in found.message and "inflated member" in found.message
    assert not marker.exists()


def test_a_torchserve_mar_deflates_its_model(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "model.mar"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("MAR-INF/MANIFEST.json", '{"model": {"serializedFile": "model.pt"}}')
        z.writestr("model.pt", _hostile_pt(tmp_path, marker))
        z.writestr("handler.py", "def handle(data, context): return data")
    ckpt = mx.open(path)
    assert ckpt.format == "archive" and ckpt.details["pickle"]["verdict"] == "dangerous"
    found = next(f for f in ckpt.findings if f.code == "dangerous_import")
    with zipfile.ZipFile(path) as z:
        assert found.offset == z.getinfo("model.pt").header_offset  # at the member's header
    assert not marker.exists()


def test_a_nemo_tar_and_a_nemo_inside_a_wheel(tmp_path):
    nemo = tar_of([("./model_config.yaml", b"target: nemo.collections.asr\n"),
                 ("./model_weights.ckpt", _saved({"state_dict": WEIGHTS}))])
    (tmp_path / "asr.nemo").write_bytes(nemo)
    assert _identify(tmp_path / "asr.nemo") == "model_archive"
    ckpt = mx.open(tmp_path / "asr.nemo")
    (row,) = ckpt.details["files"][str(tmp_path / "asr.nemo")]["archive"]["models"]
    assert row["member"] == "model_weights.ckpt" and row["stored"] and row["tensors"] == 2
    inner = mx.open(f"{tmp_path / 'asr.nemo'}!/model_weights.ckpt")
    assert np.array_equal(inner.read("state_dict.dec"), WEIGHTS["dec"].numpy())
    with zipfile.ZipFile(tmp_path / "nest.whl", "w") as z:
        z.writestr("p/asr.nemo", nemo)
    outer = mx.open(tmp_path / "nest.whl")
    (row,) = outer.details["files"][str(tmp_path / "nest.whl")]["archive"]["models"]
    assert row["kind"] == "archive" and row["models"][0]["member"] == "model_weights.ckpt"
    deep = mx.open(row["models"][0]["path"])
    assert np.array_equal(deep.read("state_dict.enc"), WEIGHTS["enc"].numpy())


def test_what_cannot_be_opened_says_so(tmp_path, wheel, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no member"):
        mx.open(f"{wheel}!/pkg/models/nothing.pt")
    from model_explorer.formats.archive import members

    monkeypatch.setattr(members, "MAX_INFLATED_MEMBER", 1000)  # c.pt inflates to more
    ckpt = mx.open(wheel)
    unread = next(f for f in ckpt.findings if f.code == "archive_member_unread")
    assert "pkg/models/c.pt" in unread.message and "1,000" in unread.message
    row = next(r for r in ckpt.details["files"][str(wheel)]["archive"]["models"] if r["member"].endswith("c.pt"))
    assert row["verdict"] == "suspicious"
    with pytest.raises(OSError, match="held in memory"):
        mx.open(f"{wheel}!/pkg/models/c.pt")


def test_a_zip_bomb_member_is_cut_at_its_declared_size(tmp_path):
    """The directory says 1 KiB; the deflated bytes hold 10 MiB of zeros: refused, not inflated."""
    path = tmp_path / "bomb.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m/model.pt", _saved(WEIGHTS) + bytes(10 << 20))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("m/model.pt")
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (1024).to_bytes(4, "little")  # the uncompressed size in the directory
    path.write_bytes(bytes(data))
    from model_explorer.formats.archive.members import Member, MemberError, inflate
    from model_explorer.sources import open_source

    src = open_source(str(path))
    member = Member("m/model.pt", info.header_offset, info.header_offset + 30 + len("m/model.pt"),
                    1024, info.compress_size, 8)
    with pytest.raises(MemberError, match="more than the 1,024 bytes"):
        inflate(src, member)
    src.close()


def test_zips_of_other_things_stay_what_they_were(tmp_path):
    with zipfile.ZipFile(tmp_path / "docs.zip", "w") as z:
        z.writestr("index.html", "<p>hi</p>")
        z.writestr("lib/x.jar", b"PK\x03\x04" + bytes(600))  # a zip inside, named like no model
    assert _identify(tmp_path / "docs.zip") == "zip_archive"
    (tmp_path / "images.tar").write_bytes(tar_of([("a.png", b"\x89PNG" * 300)]))
    assert _identify(tmp_path / "images.tar") == "tar_archive"
