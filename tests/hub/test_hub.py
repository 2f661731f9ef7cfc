"""hf:// through huggingface_hub's HfFileSystem, against a local server that answers the Hub's
HTTP API as huggingface_hub calls it (fakehub.py, HF_ENDPOINT): a DeepSeek-V3-shaped 163-shard
index, a split GGUF, a GPTQ folder at two revisions, a PEFT adapter; private, gated,
rate-limited and missing repos become findings, never tracebacks; only headers are read."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("huggingface_hub")

import model_explorer as mx  # noqa: E402

from . import hub_layouts as L  # noqa: E402
from .fakehub import GOOD_TOKEN, FakeHub, Repo, Virtual  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def repos():
    return {
        "org/ds": Repo({"main": L.deepseek_v3(163)}),
        "org/split": Repo({"main": L.split_gguf(3)}),
        "org/gptq": Repo({"main": L.gptq(4), "v1": L.gptq(8)}),
        "org/lora": Repo({"main": L.lora_adapter()}),
        "org/private": Repo({"main": L.gptq(4)}, access="private"),
        "org/gated": Repo({"main": L.gptq(4)}, access="gated"),
        "org/limited": Repo({"main": L.gptq(4)}, access="limited"),
    }


@pytest.fixture(scope="module")
def server(repos):
    with FakeHub(repos) as hub:
        yield hub


@pytest.fixture
def hub(server, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    server.reset()
    return server


def _errors(ckpt):
    return [f for f in ckpt.findings if f.severity == "error"]


def _shard_reads(server, repo="org/ds"):
    return [(p, r) for m, p, r in server.log if p.endswith(".safetensors") and repo in p]


def test_a_163_shard_index_reads_only_headers_in_parallel(hub, repos):
    hub.delay = 0.02  # a little latency, so that requests in flight overlap visibly
    try:
        ckpt = mx.open("hf://org/ds")
    finally:
        hub.delay = 0.0
    files = repos["org/ds"].revisions["main"]
    shards = [p for p in files if p.endswith(".safetensors")]
    assert len(ckpt.files) == 163 and ckpt.format == "safetensors"
    assert len(ckpt.tensors) > 40_000
    assert not _errors(ckpt), [str(f) for f in _errors(ckpt)][:5]
    # Only headers: every range starts inside its file's header, and far less than the repo is read.
    for path, rng in _shard_reads(hub):
        start = int(re.match(r"bytes=(\d+)-", rng)[1])
        assert start < len(files[path.rsplit("/", 1)[-1]].head), (path, rng)
    s = ckpt.details["hub"]
    assert s["bytes"] < 64 * 2**20 and s["repo_bytes"] > 500 * 2**30
    # At most two requests per shard (the CDN redirect and one range), as the server counted them.
    assert len(_shard_reads(hub)) <= 2 * len(shards)
    assert s["redirects"] + s["range_requests"] <= 2 * len(shards) + 2  # + config.json and the index
    assert s["requests"] == len([e for e in hub.log if "agent-harnesses" not in e[1]]) or \
        s["requests"] == len(hub.log)
    assert hub.max_inflight > 8, "shard headers are read in parallel"
    # The summary says what it took.
    (line,) = [f for f in ckpt.findings if f.code == "hub_reads"]
    assert f"{s['requests']} requests" in line.message and "MiB" in line.message


def test_tensor_entries_match_the_served_headers(hub, repos):
    ckpt = mx.open("hf://org/ds")
    info = ckpt.tensors["model.layers.10.mlp.experts.3.up_proj.weight"]
    assert info.shape == (2048, 7168)
    assert info.file.startswith("hf://org/ds/model-") and info.file.endswith("-of-00163.safetensors")
    assert ckpt.metadata["config.json"]["model_type"] == "deepseek_v3"


def test_a_revision_reads_that_revision(hub):
    main, v1 = mx.open("hf://org/gptq"), mx.open("hf://org/gptq@v1")
    assert any("/resolve/v1/" in p for _, p, _ in hub.log)
    assert main.metadata["config.json"]["quantization_config"]["bits"] == 4
    assert v1.metadata["config.json"]["quantization_config"]["bits"] == 8
    assert v1.files == ["hf://org/gptq@v1/model.safetensors"]
    assert "gptq" in str(v1.details["quantization"]).lower()
    assert not _errors(main) and not _errors(v1)


def test_a_file_inside_a_repo(hub):
    ckpt = mx.open("hf://org/gptq/model.safetensors")
    assert ckpt.files == ["hf://org/gptq/model.safetensors"]
    assert ckpt.metadata["config.json"]["model_type"] == "llama"  # the side file beside it
    assert not _errors(ckpt)


def test_split_gguf_from_the_repo_or_any_split(hub):
    whole = mx.open("hf://org/split")
    assert [os.path.basename(f) for f in whole.files] == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert len(whole.tensors) == 3 and not _errors(whole)
    one = mx.open("hf://org/split/m-00002-of-00003.gguf")
    assert one.files == whole.files and list(one.tensors) == list(whole.tensors)
    assert one.details["hub"]["headers_prefetched"] >= 3


def test_peft_adapter(hub):
    ckpt = mx.open("hf://org/lora")
    assert len(ckpt.tensors) == 8 and not _errors(ckpt)
    adapter = mx.card(ckpt).adapter
    assert adapter["pairs"] == 4 and adapter["file"] == "hf://org/lora/adapter_config.json"


def test_tensor_values_are_read_by_range(hub):
    ckpt = mx.open("hf://org/lora")
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    local = L.lora_adapter()["adapter_model.safetensors"]
    import numpy as np
    from safetensors.numpy import load

    want = load(local)[name]
    assert np.array_equal(ckpt.read(name), want)


@pytest.mark.parametrize("path, code, status", [
    ("hf://org/private", "hub_not_found", 401),
    ("hf://org/nope", "hub_not_found", 401),
    ("hf://org/gated", "hub_gated", 401),
    ("hf://org/limited", "hub_rate_limited", 429),
    ("hf://org/gptq@v9", "hub_revision_not_found", 404),
    ("hf://org/gptq/missing.safetensors", "hub_file_not_found", 404),
])
def test_refusals_are_findings(hub, path, code, status):
    ckpt = mx.open(path)
    (f,) = ckpt.findings
    assert (f.code, f.severity, f.extra.get("status")) == (code, "error", status), str(f)
    assert path.split("@")[0].split("/missing")[0] in f.message


def test_a_bucket_path_is_a_finding_not_a_traceback(hub, monkeypatch):
    """huggingface_hub 1.x+ resolves hf://buckets/... to a path with no repo."""
    hf_fs = pytest.importorskip("huggingface_hub.hf_file_system")
    if not hasattr(hf_fs, "HfFileSystemResolvedBucketPath"):
        pytest.skip("this huggingface_hub has no buckets")
    monkeypatch.setattr(hf_fs.HfFileSystem, "resolve_path",
                        lambda self, path, *a, **k: hf_fs.HfFileSystemResolvedBucketPath("w.safetensors", "org/store"))
    ckpt = mx.open("hf://buckets/org/store/w.safetensors")
    (f,) = ckpt.findings
    assert (f.code, f.severity) == ("hub_bucket", "error") and "hf://buckets/org/store" in f.message
    assert f.fix


def test_the_token_comes_from_huggingface_hubs_places(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    private = mx.open("hf://org/private")
    assert len(private.tensors) > 0 and not _errors(private)
    gated = mx.open("hf://org/gated")
    assert len(gated.tensors) > 0 and not _errors(gated)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    (f,) = mx.open("hf://org/gated").findings
    assert f.code == "hub_gated" and f.extra["status"] == 403 and "with a token" in f.message


def test_explore_reads_pages_over_the_hub(hub):
    ex = mx.explore("hf://org/gptq")
    assert ex.checkpoint.details["hub"]["requests"] > 0
    src = ex.checkpoint.byte_source(ex.checkpoint.files[0])
    assert src.read(0, 8) == src.prefix(8)[:8]
    bad = mx.explore("hf://org/gated")  # the refusal is in the Explorer, not a traceback
    assert bad.checkpoint.findings[0].code == "hub_gated"


def _cli(hub, *argv):
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "model_explorer.cli", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_info_and_doctor(hub):
    info = _cli(hub, "info", "hf://org/gptq")
    assert info.returncode == 0, info.stderr[-2000:]
    assert re.search(r"hub: \d+ requests", info.stdout), info.stdout[:2000]
    doctor = _cli(hub, "doctor", "hf://org/gated")
    assert doctor.returncode == 1 and "hub_gated" in doctor.stdout, doctor.stdout + doctor.stderr[-2000:]
    assert "Traceback" not in doctor.stderr


def test_audit_takes_hub_repos(hub):
    from model_explorer.audits.discover import discover
    from model_explorer.audits.task import audit_model

    assert discover(["hf://org/gptq", "hf://org/gptq@v1"]) == ["hf://org/gptq", "hf://org/gptq@v1"]
    ok = audit_model("hf://org/gptq", {"isolate": False})  # what each Dask worker runs
    assert ok["row"]["tensors"] > 0 and ok["row"]["errors"] == 0, ok["row"]
    for source, code in (("hf://org/gated", "hub_gated"), ("hf://org/private", "hub_not_found")):
        out = audit_model(source, {"isolate": False})
        assert code in [f["code"] for f in out["findings"]], out["findings"]


def test_virtual_file_reads_zeros_past_its_header():
    v = Virtual(b"abc", 10)
    assert v.slice(1, 6) == b"bc\0\0\0" and v.slice(5, 10) == bytes(5)
