"""One verdict everywhere: over the hostile, peer and real corpora (corpus.py), every file gets the
same findings (code and severity) and the same pickle verdict from `model-explorer doctor`, the
Explorer (its findings and the Model tab's cross-check), `mx.open` (with the cross-check doctor
runs; without it, doctor's findings less the ones the cross-check adds) and `mx.audit`, shallow
(each model in a forked child) and deep (in this process; against `doctor --deep`). The layer
profile's `layer_*` findings are the deep audit's own (exact per-tensor statistics across a
model, as the Explorer's Layers tab computes them on request) and are left out of the deep
comparison. The same audit on a Dask cluster is held equal to this one in test_audit.py."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import model_explorer as mx
from model_explorer.cli import main

from . import corpus

pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    marker = root / "PWNED"
    found = {"hostile": corpus.hostile(root / "hostile", marker), "peer": corpus.peer(root / "peer"),
             "real": corpus.real(root / "real")}
    yield found
    assert not marker.exists(), "a hostile pickle ran"


def _key(findings) -> list[tuple[str, str]]:
    return sorted((f["code"], f["severity"]) for f in findings)


def _doctor(path, deep: bool = False) -> tuple[list, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["doctor", "--json", *(["--deep"] if deep else []), str(path)])
    d = json.loads(out.getvalue())
    return _key(d["findings"]), sorted(d["verdicts"].values())


def _worst(verdicts: list[str]) -> str | None:
    order = ["safe", "needs_classes", "suspicious", "dangerous"]
    return max(verdicts, key=order.index) if verdicts else None


def _verdict(row: dict) -> str | None:
    v = row["pickle_verdict"]
    return v if isinstance(v, str) else None  # the table's missing value is NaN


def _explorer(path) -> list:
    from model_explorer.widgets.explorer import Explorer

    w = Explorer(str(path))
    try:
        thread = w.start_cross_check()  # what the Model tab starts when it opens
        if thread is not None:
            thread.join()
        return _key(list(w.findings) + list(w.model_findings))
    finally:
        w.checkpoint.close()


def _audit_equals_doctor(paths, deep: bool, isolate: bool) -> dict:
    """Audit `paths` in this process and hold each row to doctor's findings and verdict; returns
    path -> (doctor's findings, doctor's verdicts)."""
    models, findings = mx.audit([str(p) for p in paths], deep=deep, workers=0, isolate=isolate,
                                progress=False)
    assert sorted(models["source"]) == sorted(str(p) for p in paths)  # each one model, read
    out = {}
    for path in paths:
        want, verdicts = _doctor(path, deep)
        row = models[models["source"] == str(path)].iloc[0].to_dict()
        mine = findings[findings["source"] == str(path)].to_dict("records")
        assert row["status"] == "ok" and row["deep"] == deep, row["error"]
        got = [f for f in mine if not (deep and f["code"].startswith("layer_"))]
        assert _key(got) == want, (path, [f["message"] for f in got])
        assert _verdict(row) == _worst(verdicts), path
        out[path] = want, verdicts
    return out


@pytest.mark.parametrize("name", ["hostile", "peer", "real"])
def test_every_view_gives_doctors_findings_and_verdict(files, name):
    if not files[name]:
        pytest.skip(f"no {name} checkpoint installed")
    for path, (want, verdicts) in _audit_equals_doctor(files[name], deep=False, isolate=True).items():
        with mx.open(path, cross_check=True) as ckpt:
            ckpt.build_all()
            assert _key(f.to_dict() for f in ckpt.findings) == want, path
            pickles = [d["pickle"]["verdict"] for d in ckpt.details.get("files", {}).values() if "pickle" in d]
            assert sorted(pickles) == verdicts, path
        with mx.open(path) as plain:  # the cross-check is what doctor adds to a plain open
            added = plain.cross_check()
            plain.build_all()
            assert _key(f.to_dict() for f in plain.findings) == want, path
            assert set(_key(f.to_dict() for f in added)) <= set(want)
        assert _explorer(path) == want, path


@pytest.mark.parametrize("name", ["hostile", "peer", "real"])
def test_deep_audit_gives_doctor_deeps_findings(files, name):
    if not files[name]:
        pytest.skip(f"no {name} checkpoint installed")
    _audit_equals_doctor(files[name], deep=True, isolate=False)


def test_a_torchscript_archive_named_jit_is_audited(files):
    """The file `model-explorer audit` used to skip: audited, with doctor's verdict whatever it is."""
    jit = [p for p in files["peer"] if p.name == "model.jit"][0]
    models, findings = mx.audit(str(jit.parent), workers=0, progress=False)
    row = models[models["source"] == str(jit)].iloc[0]
    assert row["format"] == "pytorch" and _verdict(row) == _worst(_doctor(jit)[1])
    codes = set(findings[findings["source"] == str(jit)]["code"])
    assert "torchscript_archive" in codes and "extension_mismatch" not in codes
