"""The model-level checks that need only headers and side files, run by `mx.open` and `doctor`.

`header_checks(ckpt)` appends their findings to `ckpt.findings`: the library layout and
expected against actual tensors (layouts.py, will_load.py), tokenizer and chat template
(tokenizer_info.py), adapters (adapters.py), and the side files as an attack surface: special
tokens and tokenizer.json rules (tokenizer_audit.py), metadata and model card text
(metadata_audit.py), generation_config.json (genconfig_audit.py), auto_map's custom code
(remote_code.py). A check that fails on input nobody foresaw leaves an info finding, never a
traceback: the rest of the checkpoint still opens.

At open the expected tensors come from the built-in family tables, which need no torch.
`cross_check(ckpt)` redoes that one check against transformers' own build of the architecture
(seconds for the first import of torch) and puts its findings in place of the open-time ones;
doctor, the Model tab and repairs call it, an Explorer's first paint never waits for it.
The two give the same findings wherever the built-in tables know the model: one code per cause,
at the same place, the cross-check's text saying more (the layout finding names what config.json's
own class would do), so the Overview painted at open and doctor agree.
"""

from __future__ import annotations

from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding

ORDER = ("error", "warning", "info")


def _run(found: list[Finding], name: str, fn, *args) -> None:
    try:
        found.extend(fn(*args))
    except Exception as e:  # noqa: BLE001 - a check must never stop a checkpoint from opening
        found.append(model_finding("model_check_failed", f"The {name} check failed: "
                                   f"{type(e).__name__}: {e}"))


def _add(ckpt: CheckpointRecord, found: list[Finding]) -> list[Finding]:
    seen = {(f.code, f.tensor, f.message) for f in ckpt.findings}
    found = [f for f in found if (f.code, f.tensor, f.message) not in seen]
    ckpt.findings.extend(found)
    ckpt.findings.sort(key=lambda f: ORDER.index(f.severity))
    return found


def header_checks(ckpt: CheckpointRecord) -> list[Finding]:
    from . import (
        adapters,
        genconfig_audit,
        metadata_audit,
        remote_code,
        tokenizer_audit,
        tokenizer_info,
        will_load,
    )
    from .hparams import read_hparams

    hp = read_hparams(ckpt)
    expected: list[Finding] = []
    _run(expected, "expected-tensor", will_load.check, ckpt, hp)
    _explained_by_layout(ckpt)
    others: list[Finding] = []
    _run(others, "tokenizer", tokenizer_info.check, ckpt, hp)
    _run(others, "adapter", adapters.check, ckpt, hp)
    # what the files beside the weights make a loader do (issue 34; the chat template is in tokenizer_info)
    _run(others, "tokenizer file", tokenizer_audit.check, ckpt)
    _run(others, "metadata text", metadata_audit.check, ckpt)
    _run(others, "generation config", genconfig_audit.check, ckpt, hp)
    _run(others, "custom code", remote_code.check, ckpt)
    expected = _add(ckpt, expected)
    ckpt._expected_findings = expected  # what cross_check replaces
    ckpt._cross_checked = False
    return expected + _add(ckpt, others)


def _explained_by_layout(ckpt: CheckpointRecord) -> None:
    """A diffusers pipeline's folder holds no weights of its own, only component folders: the
    layout finding says so, and the reader's no-weights error is not a fault."""
    from .layouts import read_layout

    layout = read_layout(ckpt)
    if layout is not None and layout.pipeline_root:
        ckpt.findings[:] = [f for f in ckpt.findings if f.code != "no_weights"]


def cross_check(ckpt: CheckpointRecord) -> list[Finding]:
    """The expected-tensor check against transformers' build of the architecture (when it is
    installed and knows it), in place of the open-time one from the built-in tables. Returns the
    findings that are new; runs once per checkpoint (`transformers_available()` is false: the
    open-time findings stand)."""
    from . import expected, will_load
    from .hparams import read_hparams

    if getattr(ckpt, "_cross_checked", False):
        return []
    ckpt._cross_checked = True
    if not expected.transformers_available():
        return []
    found: list[Finding] = []
    _run(found, "expected-tensor", will_load.check, ckpt, read_hparams(ckpt), True)
    before = getattr(ckpt, "_expected_findings", [])
    old = {(f.code, f.tensor) for f in before}
    gone = {id(f) for f in before}
    ckpt.findings[:] = [f for f in ckpt.findings if id(f) not in gone]
    ckpt._expected_findings = _add(ckpt, found)
    return [f for f in ckpt._expected_findings if (f.code, f.tensor) not in old]
