"""mx.audit on a LocalCluster of two worker processes: the rows equal a plain mx.open of each
model, hostile pickles never run, parquet round-trips, SARIF validates, reruns resume, a killed
worker loses and doubles nothing, and mx.scan on Dask equals the local scan exactly."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import threading

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.audits.tables import read_parquet

from .synth import llama_like, mixed_tree, write_safetensors, write_sharded

pytest.importorskip("dask.distributed")
pytest.importorskip("pyarrow")
SCHEMA = pathlib.Path(__file__).with_name("sarif-schema-2.1.0.json")
VOLATILE = ["seconds", "report", "retries"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    marker = root / "PWNED"
    mixed_tree(root / "models", 12, marker=marker)
    return root / "models", marker


@pytest.fixture(scope="module")
def audited(tree, cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    result = mx.audit(str(tree[0]), out=out / "r.parquet", sarif=out / "r.sarif", html=out / "r.html",
                      client=cluster, progress=False)
    return result, out


def test_rows_match_a_plain_open(audited):
    (models, findings), _ = audited
    assert len(models) == 12 and models["source"].is_unique
    for row in models.to_dict("records"):
        ckpt = mx.open(row["source"])
        c = ckpt.finding_counts()
        assert row["status"] == "ok"
        assert (row["format"], row["tensors"], row["parameters"], row["bytes"]) == \
            (ckpt.format, len(ckpt.tensors), ckpt.parameter_count, ckpt.total_size)
        assert (row["errors"], row["warnings"], row["infos"]) == (c["error"], c["warning"], c["info"])
        mine = findings[findings["source"] == row["source"]]
        assert sorted(mine["code"]) == sorted(f.code for f in ckpt.findings)
        assert sorted(mine["offset"].dropna().astype(int)) == sorted(f.offset for f in ckpt.findings
                                                                     if f.offset is not None)
        ckpt.close()
    hostile = models[models["pickle_verdict"] == "dangerous"]
    assert len(hostile) == 2 and all(list(d) == ["os.system"] for d in hostile["dangerous_imports"])
    assert set(models[models["source"].str.contains("m00001")]["files"]) == {3}  # a sharded folder
    assert audited[0].exit_code == 1


def test_hostile_pickle_never_runs(audited, tree):
    assert not tree[1].exists()


def test_parquet_round_trip(audited):
    (models, findings), out = audited
    back = read_parquet(out / "r.parquet")
    assert back.models.equals(models)
    assert back.findings.equals(findings)


def test_sarif_validates(audited):
    jsonschema = pytest.importorskip("jsonschema")
    (models, findings), out = audited
    log = json.loads((out / "r.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    run = log["runs"][0]
    assert sorted(r["id"] for r in run["tool"]["driver"]["rules"]) == sorted(set(findings["code"]))
    assert len(run["results"]) == len(findings)
    past = [r for r in run["results"] if r["ruleId"] == "truncated"][0]  # at the byte where the file ends
    region = past["locations"][0]["physicalLocation"]["region"]
    assert region["byteOffset"] > 0 and region["byteLength"] >= 0
    assert past["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")


def test_html_dashboard_is_offline_and_links_reports(audited):
    _, out = audited
    page = (out / "r.html").read_text()
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    data = json.loads(page.split('id="audit-data">')[1].split("</script>")[0],
                      parse_constant=lambda c: pytest.fail(f"{c} in the page's JSON: JSON.parse refuses it"))
    assert data["models"][0]["verdict"] == "dangerous"  # worst first
    for m in data["models"]:
        assert (out / "r_reports" / m["report"]).is_file()


def test_rerun_resumes(tree, cluster, tmp_path):
    out = tmp_path / "r.parquet"
    first = mx.audit(str(tree[0]), out=out, client=cluster, progress=False)
    seen: list[str] = []
    again = mx.audit(str(tree[0]), out=out, client=cluster, progress=False,
                     _on_result=lambda src, row: seen.append(src))
    assert seen == []
    assert again.models.drop(columns=VOLATILE).equals(first.models.drop(columns=VOLATILE))
    changed = first.models["source"][0]
    os.utime(changed, ns=(0, 10**9))
    mx.audit(str(tree[0]), out=out, client=cluster, progress=False, _on_result=lambda s, r: seen.append(s))
    assert seen == [changed]


def test_deep_audit_splits_a_model_and_finds_values(cluster, tmp_path):
    t = llama_like(layers=8)
    t["model.layers.3.mlp.down_proj.weight"][:] = 0
    t["model.layers.5.self_attn.q_proj.weight"][0, 0] = np.nan
    folder = write_sharded(tmp_path / "m", t, 4, {"model_type": "llama"})
    models, findings = mx.audit(folder, deep=True, client=cluster, progress=False, part_bytes=8192)
    local = mx.open(folder, deep=True)
    want = sorted((f.code, f.tensor) for f in local.findings)
    codes = sorted((c, t) for c, t in zip(findings["code"], findings["tensor"]) if not c.startswith("layer_"))
    assert codes == want
    assert ("layer_outlier", "model.layers.3.mlp.down_proj.weight") in set(zip(findings["code"], findings["tensor"]))
    assert models["deep"][0] and models["errors"][0] >= 1


def test_scan_on_dask_equals_local(cluster, tmp_path):
    t = llama_like(layers=4)
    t["model.layers.1.mlp.up_proj.weight"][2, 3] = np.inf
    t["big"] = np.random.default_rng(1).standard_normal(300_000).astype(np.float16)  # streamed path
    p = write_safetensors(tmp_path / "m.safetensors", t)
    local = mx.scan(p, progress=False)
    remote = mx.scan(p, client=cluster, part_bytes=4096, progress=False)
    assert local.equals(remote)
    assert local["exact"].all() and len(local) == len(t)
    row = local.set_index("name").loc["model.layers.0.mlp.gate_proj.weight"]
    x = t["model.layers.0.mlp.gate_proj.weight"].astype(np.float64)
    assert row["norm"] == pytest.approx(np.linalg.norm(x), rel=1e-6)
    assert row["min"] == x.min() and row["max"] == x.max()
    assert local.set_index("name").loc["model.layers.1.mlp.up_proj.weight", "inf"] == 1


def test_cli_audit_exit_codes(tree, cluster, tmp_path, capsys):
    from model_explorer.cli import main

    addr = cluster.scheduler.address
    clean = tmp_path / "clean"
    os.makedirs(clean)
    write_safetensors(clean / "a.safetensors", llama_like(layers=2))
    assert main(["audit", str(clean), "--scheduler", addr]) == 0
    assert main(["audit", str(tree[0]), "--scheduler", addr, "--sarif", str(tmp_path / "s.sarif")]) == 1
    assert main(["audit", str(clean), str(tmp_path / "missing.gguf"), "--scheduler", addr]) == 2
    assert "unreadable" in capsys.readouterr().out


def test_http_sources(served, cluster):
    folder, base, server = served
    for i in range(3):
        write_safetensors(folder / f"m{i}.safetensors", llama_like(layers=2, hidden=128, ffn=256, seed=i))
    models, _ = mx.audit([f"{base}/m{i}.safetensors" for i in range(3)], client=cluster, progress=False)
    assert list(models["status"]) == ["ok"] * 3
    assert (models["bytes_read"] <= 64 * 1024).all()  # one first read of the header, not the data
    assert (models["bytes"] > 4 * 64 * 1024).all()


@pytest.mark.slow
def test_killed_worker_loses_nothing(tree, cluster, tmp_path):
    pids = cluster.run(os.getpid)
    killed = threading.Event()
    rows: list[str] = []

    def on_result(src, row):
        rows.append(src)
        if len(rows) == 3 and not killed.is_set():
            killed.set()
            os.kill(next(iter(pids.values())), signal.SIGKILL)

    result = mx.audit(str(tree[0]), client=cluster, progress=False, _delay=0.4,
                      _on_result=on_result)
    models, findings = result
    assert killed.is_set()
    assert len(models) == 12 and models["source"].is_unique and sorted(rows) == sorted(models["source"])
    assert (models["status"] == "ok").all()
    assert models["retries"].sum() >= 1 and models["retries"].max() == 1  # one kill: once each
    assert "retried after a worker died" in result.summary
    baseline = mx.audit(str(tree[0]), client=cluster, progress=False)
    assert models.drop(columns=VOLATILE).equals(baseline.models.drop(columns=VOLATILE))
    assert findings.equals(baseline.findings)


def test_dask_gives_the_in_process_answer(cluster, tmp_path):
    """The audit on a cluster equals the one run in this process (test_one_verdict.py holds that
    one to doctor's word): rows, findings and the files not audited, deep included."""
    from .corpus import hostile, not_read_yet, peer

    marker = tmp_path / "PWNED"
    peer(tmp_path / "tree" / "peer")
    for extra in hostile(tmp_path / "tree" / "hostile", marker)[6:]:  # six are enough here
        extra.unlink()
    not_read_yet(tmp_path / "tree" / "later")
    for deep in (False, True):
        here = mx.audit(str(tmp_path / "tree"), workers=0, deep=deep, progress=False)
        there = mx.audit(str(tmp_path / "tree"), client=cluster, deep=deep, progress=False)
        assert here.models.drop(columns=VOLATILE).equals(there.models.drop(columns=VOLATILE))
        assert here.findings.equals(there.findings)
        # ONNX, HDF5/Keras, Flax, TFLite, legacy GGML and OpenVINO are read (issue 33);
        # openvino_model.bin goes with its XML
        assert here.skipped.equals(there.skipped) and len(here.skipped) == 1
    assert len(here.models) == 21 and not marker.exists()


def test_retries_count_this_audits_remove_worker_events_once():
    """The scheduler logs a removed worker under its own topic and under "all": read once, and
    only since this audit began (an earlier audit on the cluster used the same keys)."""
    from model_explorer.audits.runner import retried

    class Client:
        def get_events(self, topic=None):
            assert topic == "all"
            return [(5.0, {"action": "remove-worker", "processing-tasks": {"audit-0-a"}}),
                    (15.0, {"action": "remove-worker", "processing-tasks": {"audit-0-a", "deep-1-b"}}),
                    (16.0, {"action": "add-worker"})]

    keys = {"audit-0-a": ["m1", "m2"], "deep-1-b": ["m3"]}
    assert retried(Client(), keys, since=10.0) == {"m1": 1, "m2": 1, "m3": 1}
    assert retried(object(), keys, since=0.0) == {}  # the in-process runner has no events
