"""Sharded indexes rebuilt from the shards' own headers.

The shards are the truth: every tensor a shard holds is mapped to that shard, total_size is the
sum of their byte ranges, a shard saved under a near-miss name ("model-00002-of-00002 (1)
.safetensors") that holds what the index expects is written under the expected name, and a
tensor stored in two shards is kept once (the copy the index named, else the first shard's).
"""

from __future__ import annotations

import os
import re

from ..spans import Finding
from .build import Build, OutFile, load_json, safetensors_file, source_dir
from .fix import Fix
from .writer import sha256_range

INDEX_CODES = ("missing_tensor", "orphan_tensor", "total_size_mismatch", "duplicate_tensor", "bad_index")
_NEAR_MISS = re.compile(r"(\s*\(\d+\)|[ _-]copy\d*|\.\d+)(?=\.safetensors$)")


def normalized(name: str) -> str:
    """A shard name with the decorations copies pick up removed: " (1)", " copy", ".1"."""
    return _NEAR_MISS.sub("", name)


def weight_map(build: Build) -> dict[str, str]:
    """Tensor name -> shard, as the build will write it."""
    return {t.name: f.name for f, t in build.tensors()}


def index_json(build: Build) -> dict:
    meta = dict(build.index_meta)
    meta["total_size"] = sum(t.length for _, t in build.tensors())
    return {"metadata": meta, "weight_map": dict(sorted(weight_map(build).items()))}


def _expected(path: str) -> dict[str, list[str]] | None:
    try:
        index = load_json(path)
    except (OSError, ValueError):
        return None
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict):
        return None
    out: dict[str, list[str]] = {}
    for name, shard in wm.items():
        if isinstance(shard, str):
            out.setdefault(shard, []).append(name)
    return out


def propose(build: Build, findings: list[Finding]) -> list[Fix]:
    if build.index_source is None:
        return []
    found = [f for f in findings if f.code in INDEX_CODES]
    directory = source_dir(build.index_source)
    expected = _expected(build.index_source)
    present = {f.name for f in build.files}
    on_disk = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    renames: dict[str, str] = {}  # near-miss file -> the shard name the index expects
    if expected is None:
        extra = [n for n in on_disk if n not in present]
    else:
        extra = []
        for shard, names in expected.items():
            if shard in present:
                continue
            for cand in on_disk:
                if cand in expected or cand in renames:
                    continue
                if normalized(cand) == shard or set(names) <= set(safetensors_file(
                        os.path.join(directory, cand), cand).result.tensors):
                    renames[cand] = shard
                    found += [f for f in findings if f.code == "missing_shard" and f.tensor in names]
                    break
    if not found and not renames and not extra:
        return []

    def apply(b: Build) -> None:
        for cand, shard in renames.items():
            b.files.append(safetensors_file(os.path.join(directory, cand), shard))
            b.notes.append(f"{cand!r} holds the tensors the index expects in {shard!r}: written as {shard!r}.")
        for cand in extra:
            b.files.append(safetensors_file(os.path.join(directory, cand), cand))
        b.files.sort(key=lambda f: f.name)
        _dedupe(b, expected or {})
        b.index_rewrite = True

    what = []
    if renames:
        what.append("renamed shard(s) " + ", ".join(f"{a!r} -> {b!r}" for a, b in renames.items()))
    what.append("weight_map and total_size rebuilt from the shards' headers")
    return [Fix("rebuild_index", "; ".join(what) + ".", found,
                {"files": sorted({os.path.basename(build.index_source), *renames.values()}),
                 "keys": ["weight_map", "metadata.total_size"]}, apply)]


def _dedupe(b: Build, expected: dict[str, list[str]]) -> None:
    """Keep one copy of a tensor stored in several shards: the one the index named, else the
    first shard's; say which, and whether the copies' bytes agree."""
    named = {n: shard for shard, names in expected.items() for n in names}
    holders: dict[str, list[OutFile]] = {}
    for f in b.files:
        for t in f.tensors:
            holders.setdefault(t.name, []).append(f)
    for name, files in holders.items():
        if len(files) < 2:
            continue
        keep = next((f for f in files if f.name == named.get(name)), files[0])
        kept = next(t for t in keep.tensors if t.name == name)
        h = sha256_range(kept.src_file, kept.src_offset, kept.length)
        for f in files:
            if f is keep:
                continue
            drop = next(t for t in f.tensors if t.name == name)
            same = drop.length == kept.length and sha256_range(drop.src_file, drop.src_offset, drop.length) == h
            f.tensors = [t for t in f.tensors if t is not drop]
            f.touch()
            b.notes.append(f"{name!r} was stored in {keep.name!r} and {f.name!r}: kept the copy in "
                           f"{keep.name!r}, dropped the one in {f.name!r} "
                           f"({'identical bytes' if same else 'the bytes DIFFER: check which is right'}).")
