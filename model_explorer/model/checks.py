"""The model-level checks that need only headers and side files, run by `mx.open` and `doctor`.

`header_checks(ckpt)` appends their findings to `ckpt.findings`: expected against actual
tensors (will_load.py), tokenizer and chat template (tokenizer_info.py), adapters
(adapters.py). A check that fails on input nobody foresaw leaves an info finding, never a
traceback: the rest of the checkpoint still opens.
"""

from __future__ import annotations

from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding

ORDER = ("error", "warning", "info")


def header_checks(ckpt: CheckpointRecord) -> list[Finding]:
    from . import adapters, tokenizer_info, will_load
    from .hparams import read_hparams

    found: list[Finding] = []

    def run(name, fn, *args) -> None:
        try:
            found.extend(fn(*args))
        except Exception as e:  # noqa: BLE001 - a check must never stop a checkpoint from opening
            found.append(model_finding("model_check_failed", f"The {name} check failed: "
                                       f"{type(e).__name__}: {e}"))

    hp = read_hparams(ckpt)
    run("expected-tensor", will_load.check, ckpt, hp)
    run("tokenizer", tokenizer_info.check, ckpt, hp)
    run("adapter", adapters.check, ckpt, hp)
    seen = {(f.code, f.tensor, f.message) for f in ckpt.findings}
    found = [f for f in found if (f.code, f.tensor, f.message) not in seen]
    ckpt.findings.extend(found)
    ckpt.findings.sort(key=lambda f: ORDER.index(f.severity))
    return found
