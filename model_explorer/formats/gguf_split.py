"""Split GGUF files (`NAME-00001-of-0000N.gguf`, llama.cpp's gguf-split): find the siblings,
read them in order and check the `split.*` keys against what they hold."""

from __future__ import annotations

import re
from collections.abc import Callable

from .. import sources
from ..ggml import Keys
from ..records import CheckpointRecord
from ..spans import Finding
from .result import FileResult

_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def read_splits(path: str, first: FileResult, ckpt: CheckpointRecord,
                read_file: Callable[[str], FileResult]) -> None:
    """Read the other splits of the GGUF at `path` (already read into `ckpt` as `first`).

    `read_file(path)` reads one split and merges it into `ckpt`, returning its FileResult, as
    for `shards.read_index`. Opened at a later split, the model restarts from the first.
    """
    count_kv = first.metadata.get(Keys.SPLIT_COUNT)
    m = _SPLIT.match(sources.basename(path))
    count = count_kv.value if count_kv is not None else (int(m["count"]) if m else 1)
    if not isinstance(count, int) or count <= 1:
        return
    where: tuple[int | None, int | None] = \
        (count_kv.offset, count_kv.length) if count_kv is not None else (None, None)
    if m is None:
        ckpt.findings.append(Finding.of("split_name", f"The file says it is one of {count} "
                                        "splits, but its name does not follow "
                                        "NAME-00001-of-0000N.gguf, so the others cannot be found.",
                                        *where, file=first.file))
        return
    directory = sources.dirname(path)
    no_kv = first.metadata.get(Keys.SPLIT_NO)
    this_no = no_kv.value if no_kv is not None and isinstance(no_kv.value, int) else int(m["no"]) - 1
    merged = None  # a later split already in the checkpoint
    if this_no != 0:
        first_path = sources.join(directory, f"{m['stem']}-00001-of-{count:05d}.gguf")
        if sources.exists(first_path):
            # Opened a later split: restart from the first so the model reads in order.
            ckpt.files.clear()
            ckpt.tensors.clear()
            ckpt.spans.clear()
            ckpt.findings.clear()
            ckpt.metadata.clear()
            ckpt.sizes.clear()
            first = read_file(first_path)
        else:
            ckpt.findings.append(Finding.of("missing_split", f"The first split "
                                            f"{sources.basename(first_path)!r} does not exist; its "
                                            "tensors and the model's metadata are missing.", *where,
                                            file=first.file))
            merged = this_no + 1
    for i in range(2, count + 1):
        if i == merged:
            continue
        p = sources.join(directory, f"{m['stem']}-{i:05d}-of-{count:05d}.gguf")
        if not sources.exists(p):
            ckpt.findings.append(Finding.of("missing_split", f"Split {i} of {count} "
                                            f"({sources.basename(p)!r}) does not exist; its tensors "
                                            "are missing.", *where, file=first.file))
            continue
        before = set(ckpt.tensors)
        result = read_file(p)
        no = result.metadata.get(Keys.SPLIT_NO)
        if no is not None and no.value != i - 1:
            ckpt.findings.append(Finding.of("split_number", f"{sources.basename(p)!r} says "
                                            f"it is split.no {no.value!r}, expected {i - 1}.",
                                            no.offset, no.length, file=p))
        for name, info in result.tensors.items():
            if name in before:
                span: tuple[int, int] = info.extra["info_span"]
                ckpt.findings.append(Finding.of("duplicate_tensor", f"{name!r} appears in "
                                             "more than one split; the first copy is used.",
                                             *span, tensor=name, file=p))
    total = first.metadata.get(Keys.SPLIT_TENSORS_COUNT)
    if total is not None and total.value != len(ckpt.tensors):
        ckpt.findings.append(Finding.of("split_tensor_count", f"split.tensors.count says "
                                        f"{total.value} tensors, but the splits hold "
                                        f"{len(ckpt.tensors)}.", total.offset, total.length,
                                        file=first.file))
