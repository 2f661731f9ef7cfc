"""An audit sees every file: each is identified by its first bytes, not its name; every file not
audited is listed with its reason in the skipped table, the parquet output, the SARIF run's
notifications, the HTML dashboard and the summary line; a weight file no model's open reads is
audited on its own; names that lie get `extension_mismatch`. Runs in this process (workers=0);
test_audit.py holds the Dask cluster to the same answers."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import shutil

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.audits.discover import plan
from model_explorer.audits.tables import read_parquet, summary_line
from model_explorer.formats.detect import HEAD_BYTES, detect, identify

from . import corpus
from .synth import small_tensors, write_gguf, write_safetensors

pytest.importorskip("pyarrow")
SCHEMA = pathlib.Path(__file__).with_name("sarif-schema-2.1.0.json")
REPR = re.compile(r"\['|\{'|\('|': ")  # a list, dict or tuple of strings as Python prints it


def _identify(path) -> str:
    with open(path, "rb") as f:
        def read(offset, length):
            f.seek(offset)
            return f.read(length)

        return identify(read, os.path.getsize(path), os.path.basename(path)).kind


def _audit(*sources, **kw):
    return mx.audit([str(s) for s in sources], workers=0, progress=False, **kw)


def test_each_format_is_identified_by_its_bytes(tmp_path):
    peer = {p.name: p for p in corpus.peer(tmp_path / "peer")}
    kinds = {name: _identify(p) for name, p in peer.items()}
    assert kinds == {
        "torch_zip.pt": "zip", "torch_legacy.pt": "torch_legacy", "model.jit": "torchscript",
        "arrays.npz": "npz", "array.npy": "npy", "lib.safetensors": "safetensors",
        "gguf_py.gguf": "gguf", "pickle_p0.pkl": "pickle", "pickle_named.safetensors": "pickle",
        "gguf_named.bin": "gguf", "zip_named.onnx": "zip"}
    for name, kind in corpus.not_read_yet(tmp_path / "later").items():
        assert _identify(tmp_path / "later" / name) == kind, name
    side = {"config.json": b'{\n  "model_type": "llama"\n}\n', "tokenizer.json": b'{"version": "1.0"}',
            "README.md": b"---\nlicense: apache-2.0\n---\n# A model\n", "vocab.txt": b"[PAD]\n[UNK]\n",
            "modeling.py": b"import torch\n", "logo.png": b"\x89PNG\r\n\x1a\n" + bytes(32),
            "tokenizer.model": b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02" + bytes(8)}
    for name, data in side.items():
        (tmp_path / name).write_bytes(data)
    assert {n: _identify(tmp_path / n) for n in side} == {
        "config.json": "json", "tokenizer.json": "json", "README.md": "text", "vocab.txt": "text",
        "modeling.py": "text", "logo.png": "image", "tokenizer.model": "sentencepiece"}


@pytest.mark.parametrize("text", [b"NOTICE\nThis product includes", b"Node.js is licensed as follows:\n",
                                  b"In this repo\n", b"N.B. the weights are fp16\n",
                                  b"compressed_tensors/INSTALLER,sha256=zuuue4,4\ncompressed_tensors/x,,\n",
                                  b"(c) 2024 Someone\nAll rights reserved.\n",
                                  b"Very long first line " * 40, b"license: mit\n" * 400])
def test_text_that_starts_with_an_opcode_letter_is_not_a_pickle(text):
    assert detect(text[:512], len(text)) == "unknown"
    assert detect(text[:HEAD_BYTES], len(text) + 10_000) == "unknown"


@pytest.mark.parametrize("protocol", [0, 1])
def test_text_pickles_are_still_pickles(protocol):
    for obj in ({"a": 1}, list(range(2000)), {"w": [1.5, "x" * 5000]}, None):
        data = pickle.dumps(obj, protocol=protocol)
        for n in (64, 512, HEAD_BYTES):
            assert detect(data[:n], len(data)) == "pickle", (protocol, n)


@pytest.fixture
def tree(tmp_path):
    """A folder as people have them: a model with its side files (and a subfolder of them), a
    TorchScript archive, exports in formats not read yet, a pickle beside a safetensors model,
    and the files an audit cannot or must not read."""
    root = tmp_path / "models"
    bert = root / "bert"
    (bert / "1_Pooling").mkdir(parents=True)
    write_safetensors(bert / "model.safetensors", small_tensors(0))
    (bert / "config.json").write_text('{"model_type": "bert"}')
    (bert / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    corpus.peer(tmp_path / "peer")
    shutil.copy(tmp_path / "peer" / "torch_zip.pt", bert / "pytorch_model.bin")  # read by no open of the folder
    shutil.copy(tmp_path / "peer" / "model.jit", root / "model.jit")
    onnx = root / "onnx"
    onnx.mkdir()
    (onnx / "model.onnx").write_bytes(corpus.onnx_bytes())
    (onnx / "model.onnx_data").write_bytes(bytes(range(256)))
    for q in ("q4", "fp16", "quantized"):
        (onnx / f"model_{q}.onnx").write_bytes(corpus.onnx_bytes())
    (root / "model.pte").write_bytes(b"\x1c\x00\x00\x00ET12" + bytes(56))  # ExecuTorch: not read
    (root / "notes.md").write_text("what these models are")
    (root / "table.dat").write_bytes(bytes(range(256)))
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    outside = tmp_path / "elsewhere.safetensors"
    write_safetensors(outside, small_tensors(1))
    os.symlink(outside, root / "linked.safetensors")
    os.symlink(root / "gone.bin", root / "dangling.bin")
    write_gguf(root / "big.gguf", small_tensors(2, 4, 64))
    return root


def test_plan_lists_every_file(tree):
    p = plan(str(tree), max_file_bytes=40_000)
    rel = lambda path: os.path.relpath(path, tree)  # noqa: E731
    onnx = ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_q4.onnx", "onnx/model_quantized.onnx"]
    assert [rel(m) for m in p.models] == ["model.jit", "bert", *onnx]  # each ONNX file a model
    assert sorted(rel(w) for w in p.weights) == ["bert/model.safetensors", "bert/pytorch_model.bin",
                                                 "model.jit", *onnx]
    got = {rel(e.path): (e.reason, e.label, rel(e.model) if e.model else None) for e in p.files}
    assert got == {
        "bert/config.json": ("side_file", "JSON", "bert"),
        "bert/1_Pooling/config.json": ("side_file", "JSON", "bert"),
        "bert/vocab.txt": ("side_file", "text", "bert"),
        "onnx/model.onnx_data": ("side_file", "ONNX data", "onnx/model.onnx"),  # its external data
        "model.pte": ("format_not_read", "ExecuTorch program", None),
        "notes.md": ("side_file", "Markdown", "model.jit"),  # the model in the same folder
        "table.dat": ("not_model", "unrecognised bytes", None),
        ".git": ("not_searched", "folder", None),
        "linked.safetensors": ("link_outside", "link", None),
        "dangling.bin": ("unreadable", "unreadable file", None),
        "big.gguf": ("too_large", "file over the size limit", None),
    }
    for e in p.files:
        assert e.detail and not REPR.search(e.detail), e.detail


def test_audit_reads_what_no_open_read_and_lists_the_rest(tree, tmp_path):
    out = tmp_path / "out"
    result = _audit(tree, out=out / "r.parquet", sarif=out / "r.sarif", html=out / "r.html",
                    max_file_bytes=40_000)
    models, skipped = result.models, result.skipped
    rel = lambda path: os.path.relpath(path, tree)  # noqa: E731
    # the folder's open reads model.safetensors; pytorch_model.bin beside it is audited on its own
    onnx = ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_q4.onnx", "onnx/model_quantized.onnx"]
    assert [rel(s) for s in models["source"]] == ["model.jit", "bert", *onnx, "bert/pytorch_model.bin"]
    assert (models["status"] == "ok").all()
    read = {rel(p) for paths in models["paths"] for p in paths}
    assert read == {"bert/model.safetensors", "bert/pytorch_model.bin", "model.jit", *onnx}
    assert set(skipped["path"].map(rel)) == {
        "bert/config.json", "bert/1_Pooling/config.json", "bert/vocab.txt", "model.pte",
        "onnx/model.onnx_data", "notes.md", "table.dat", ".git", "linked.safetensors", "dangling.bin", "big.gguf"}
    line = result.summary
    assert line.startswith("7 models: 0 unreadable, ")
    head, counts = line.split("; 6 files not audited: ")
    assert sorted(counts.split(", ")) == sorted([
        "1 ExecuTorch program (format not read yet)", "1 folder not searched",
        "1 not a model format", "1 link leaving the audited folder", "1 unreadable",
        "1 too large for the set limit"])
    assert result.exit_code == 2  # a file could not be read
    # parquet: the skipped table beside the models and findings, as returned
    back = read_parquet(out / "r.parquet")
    assert back.skipped.equals(skipped) and back.models.equals(models)
    # SARIF: each skipped file is a notification of the run, located and with its reason
    jsonschema = pytest.importorskip("jsonschema")
    log = json.loads((out / "r.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    by_reason = {}
    for n in notes:
        by_reason.setdefault(n["descriptor"]["id"], []).append(n)
    assert len(by_reason["format_not_read"]) == 1 and by_reason["unreadable"][0]["level"] == "error"
    assert all(n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")
               for n in notes)
    assert log["runs"][0]["properties"]["summary"] == line
    # HTML: the summary line and every skipped file, drawn with textContent
    page = (out / "r.html").read_text()
    data = json.loads(page.split('id="audit-data">')[1].split("</script>")[0],
                      parse_constant=lambda c: pytest.fail(f"{c} in the page's JSON: the browser cannot parse it"))
    assert data["summary"] == line and len(data["skipped"]) == len(skipped)
    assert {r[0] for r in data["skipped"]} == set(skipped["path"])
    assert "innerHTML" not in page
    for text in [line, *skipped["detail"], *(n["message"]["text"] for n in notes)]:
        assert not REPR.search(text), text


def test_names_that_lie_are_audited_as_what_they_are(tmp_path):
    files = {p.name: p for p in corpus.peer(tmp_path / "peer")}
    liars = {"pickle_named.safetensors": "pickle", "gguf_named.bin": "gguf", "zip_named.onnx": "pytorch"}
    models, findings = _audit(*(files[n] for n in liars))
    for name, fmt in liars.items():
        row = models[models["source"] == str(files[name])].iloc[0]
        assert row["status"] == "ok" and row["format"] == fmt, name
        assert row["tensors"] == 2, name
        mine = findings[findings["source"] == str(files[name])]
        assert "extension_mismatch" in set(mine["code"]), name
        assert "unknown_format" not in set(mine["code"]), name


def test_a_weight_named_file_that_no_magic_matches_is_still_audited(tmp_path):
    """A download cut to its first bytes, or a pickle the first-bytes test does not recognise:
    the reader of the format the name claims says what is wrong."""
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00")
    (tmp_path / "pytorch_model.bin").write_bytes(b"cos\nsystem\n(S'true'\ntR.\n\n\n")
    (tmp_path / "weights.dat").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    result = _audit(tmp_path)
    assert sorted(os.path.basename(s) for s in result.models["source"]) == ["model.safetensors", "pytorch_model.bin"]
    bin_row = result.models[result.models["source"].str.endswith(".bin")].iloc[0]
    assert bin_row["pickle_verdict"] == "dangerous"
    assert list(result.skipped["reason"]) == ["not_model"]


def test_the_summary_line_counts_what_was_not_audited():
    import pandas as pd

    from model_explorer.audits.tables import skipped_frame

    models = pd.DataFrame({"status": ["ok"] * 9, "errors": [0] * 9, "pickle_verdict": [None] * 9})
    files = [{"path": f"m{i}.onnx", "reason": "format_not_read", "kind": "onnx", "label": "ONNX",
              "detail": "", "bytes": 1, "model": None} for i in range(6)]
    files += [{"path": "x.bin", "reason": "unreadable", "kind": "unreadable", "label": "unreadable file",
               "detail": "", "bytes": None, "model": None},
              {"path": "config.json", "reason": "side_file", "kind": "json", "label": "JSON",
               "detail": "", "bytes": 2, "model": "m"}]
    line = summary_line(models, pd.DataFrame({"code": []}), skipped_frame(files))
    assert line == ("9 models: 0 unreadable, 0 with errors, 0 dangerous pickles, 0 findings; "
                    "7 files not audited: 6 ONNX (format not read yet), 1 unreadable")


def test_silero_vad_folder_as_a_new_user_audits_it():
    """The folder of the issue: a TorchScript archive, a safetensors file and six ONNX exports."""
    import realfiles  # tests/ is on the path

    data = realfiles.silero_folder()
    if data is None:
        pytest.skip("silero-vad is not installed")
    result = _audit(data)
    names = sorted(os.path.basename(s) for s in result.models["source"])
    assert names == sorted(["silero_vad.jit", "silero_vad_16k.safetensors", "silero_vad.onnx",
                            "silero_vad_16k_op15.onnx", "silero_vad_16k_sequence.onnx",
                            "silero_vad_half.onnx", "silero_vad_op18_ifless.onnx",
                            "silero_vad_openvino_16k.onnx"])
    assert (result.models["status"] == "ok").all()
    assert "format_not_read" not in set(result.skipped["reason"]) and "not read" not in result.summary


def test_cli_prints_the_files_not_audited(tree, capsys):
    from model_explorer.cli import main

    code = main(["audit", str(tree), "--workers", "0", "--max-file-size", "40000"])
    out = capsys.readouterr().out
    assert code == 2
    assert f"{tree / 'model.pte'}: not audited: ExecuTorch program: this version" in out
    assert "bert/config.json" not in out  # side files stay in the tables
    last = out.strip().splitlines()[-1]
    assert last.startswith("7 models: ") and "6 files not audited: " in last


def test_every_file_of_a_hub_repo_is_identified_by_a_range_read(tmp_path, monkeypatch):
    """hf://: the repo is one model, opened whole; every file of its listing is identified from
    its first bytes (one range request of at most HEAD_BYTES, never the whole file), and the
    pickle the repo's open does not read is audited on its own."""
    pytest.importorskip("huggingface_hub")
    from hub.fakehub import FakeHub, Repo, Virtual  # tests/ is on the path

    peer = {p.name: p.read_bytes() for p in corpus.peer(tmp_path / "peer")}
    st = (tmp_path / "m.safetensors")
    write_safetensors(st, small_tensors(0))
    head = st.read_bytes()
    files = {"model.safetensors": Virtual(head, len(head) + 64 * 2**20),  # served as LFS: a CDN redirect
             "config.json": b'{"model_type": "bert"}', "README.md": b"# A model\n",
             "pytorch_model.bin": peer["torch_zip.pt"], "onnx/model.onnx": corpus.onnx_bytes(),
             "onnx/model.onnx_data": bytes(range(256)) * 64, "model.jit": peer["model.jit"]}
    with FakeHub({"org/repo": Repo({"main": files})}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        found = plan("hf://org/repo")
        assert found.models == ["hf://org/repo"]
        assert sorted(found.weights) == ["hf://org/repo/model.jit", "hf://org/repo/model.safetensors",
                                         "hf://org/repo/onnx/model.onnx", "hf://org/repo/pytorch_model.bin"]
        got = {e.path.removeprefix("hf://org/repo/"): (e.reason, e.label) for e in found.files}
        assert got == {"config.json": ("side_file", "JSON"), "README.md": ("side_file", "Markdown"),
                       "onnx/model.onnx_data": ("side_file", "ONNX data")}
        ranges = [r for m, p, r in server.log if r and "/resolve/" in p]
        assert ranges and all(int(r.split("-")[1]) < HEAD_BYTES for r in ranges if r.startswith("bytes=0-"))
        result = _audit("hf://org/repo")
    assert list(result.models["source"]) == ["hf://org/repo", "hf://org/repo/model.jit",
                                             "hf://org/repo/pytorch_model.bin", "hf://org/repo/onnx/model.onnx"]
    assert (result.models["status"] == "ok").all()
    assert list(result.models["format"]) == ["safetensors", "pytorch", "pytorch", "onnx"]
    assert "ONNX" not in result.summary


def test_a_folder_over_http_is_identified_by_range_reads(served):
    folder, base, server = served
    write_safetensors(folder / "model.safetensors", small_tensors(0, 2, 256))
    (folder / "model.onnx").write_bytes(corpus.onnx_bytes())
    (folder / "config.json").write_text('{"model_type": "bert"}')
    server.requests.clear()
    found = plan(base + "/")
    assert found.models == [base]  # config.json beside safetensors: the folder is the model
    assert found.weights == [f"{base}/model.onnx", f"{base}/model.safetensors"]  # ONNX: audited alone
    got = {os.path.basename(e.path): (e.reason, e.model) for e in found.files}
    assert got == {"config.json": ("side_file", base)}
    assert server.requests and all(end - start < HEAD_BYTES for _, start, end in server.requests)


def test_a_tar_is_torchs_legacy_format_only_when_it_holds_its_members(tmp_path):
    import torch
    from pytorch.helpers import tar_of  # tests/ is on the path
    from pytorch.test_containers import torch_tar

    legacy = torch_tar({"w": torch.ones(3)})
    files = {"legacy.tar": legacy, "images.tar": tar_of([("a.png", b"\x89PNG" * 300), ("b.txt", b"hi")]),
             # torch.load finds its members by name, after anything else
             "late.tar": tar_of([("readme.txt", b"x" * 2000), ("pickle", pickle.dumps(1, protocol=2))])}
    kinds = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        kinds[name] = _identify(tmp_path / name)
    assert kinds == {"legacy.tar": "torch_tar", "images.tar": "tar_archive", "late.tar": "torch_tar"}


def test_the_hugging_face_cache_is_audited_through_its_snapshots(tmp_path):
    """snapshots/<rev>/ holds links into blobs/: each blob is audited once, through its link."""
    repo = tmp_path / "hub" / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    write_safetensors(repo / "blobs" / "9f1e", small_tensors(0))
    (repo / "blobs" / "77aa").write_text('{"model_type": "llama"}')
    os.symlink("../../blobs/9f1e", snap / "model.safetensors")
    os.symlink("../../blobs/77aa", snap / "config.json")
    result = _audit(tmp_path / "hub")
    assert list(result.models["source"]) == [str(snap)]
    reasons = {os.path.relpath(p, repo): r for p, r in zip(result.skipped["path"], result.skipped["reason"])}
    assert reasons == {"blobs/9f1e": "alias", "blobs/77aa": "alias", "snapshots/abc123/config.json": "side_file"}
    assert "not audited" not in result.summary


def test_a_zip_is_read_from_its_central_directory(tmp_path):
    """TorchScript writes its tensors first and data.pkl and code/ after them: the names come
    from the central directory at the end, past a comment too; a zip cut short goes to the torch
    reader, which says where it ends."""
    import zipfile

    corpus.peer(tmp_path / "peer")
    jit = (tmp_path / "peer" / "model.jit").read_bytes()
    with zipfile.ZipFile(tmp_path / "peer" / "model.jit") as z:
        assert not z.namelist()[0].endswith(".pkl")  # the first local header says nothing
    commented = tmp_path / "commented.pt"
    with zipfile.ZipFile(tmp_path / "peer" / "model.jit") as src, zipfile.ZipFile(commented, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        dst.comment = b"c" * 3000
    cut = tmp_path / "cut.pt"
    cut.write_bytes(jit[:len(jit) // 2])
    other = tmp_path / "docs.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("index.html", "<p>hi</p>")
    assert [_identify(p) for p in (commented, cut, other)] == ["torchscript", "zip", "zip_archive"]
