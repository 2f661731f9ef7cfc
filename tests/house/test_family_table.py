"""A family is one row (model/families): nothing outside the table compares family names.

A reader asks the row (`family(mt).window`, `by_gguf_arch(arch).norm_offset`) instead of testing
`model_type == "gemma2"` or `arch in ("gemma", "gemma2", "gemma3")`; adding a family is then one
row and its tests. This test parses every module outside model/families and fails on a string
equal to a known Hugging Face model_type or GGUF architecture that is compared (==, !=, in, not
in), keys a dict literal, or stands in a tuple, list or set literal beside another such name.
The few sites where such a string means something else are listed below with their reason.
"""

from __future__ import annotations

import ast
import pathlib
from collections import Counter

from model_explorer.model import families

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "model_explorer"
TABLE = PACKAGE / "model" / "families"

# (module path, the name) -> (how many sites, why they are not a family test)
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("model/tokenizer.py", "gpt2"): (2, "tokenizer.ggml.model names a tokenizer (byte-level BPE), not a family"),
    ("model/tokenizer.py", "llama"): (1, "tokenizer.ggml.model names a tokenizer (SentencePiece BPE), not a family"),
    ("model/tokenizer_info.py", "gpt2"): (3, "tokenizer.ggml.model values, described for people"),
    ("model/tokenizer_info.py", "llama"): (1, "tokenizer.ggml.model values, described for people"),
    ("checks/deep.py", "gemma"): (1, "a substring test on any architecture name (Gemma's large norm weights)"),
    ("conversion/source.py", "llama"): (1, "the plain llama GGUF keeps gguf_meta's older path; every row else "
                                           "goes through gguf_source"),
}
SITE_LIMIT = 10


def family_names() -> set[str]:
    return {n for row in families.ROWS for n in (*row.model_types, *row.gguf_archs)}


def _strings(node: ast.AST, names: set[str]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def sites(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each family-name test in a module."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += _strings(side, names)
        elif isinstance(node, ast.Dict):
            found += [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            listed = _strings(node, names)
            found += listed if len(listed) >= 2 else []
        out += [(node.lineno, n) for n in dict.fromkeys(found)]
    return sorted(set(out))


def test_no_family_name_test_outside_the_table():
    names = family_names()
    counts: Counter = Counter()
    where: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if TABLE in path.parents:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        for line, name in sites(ast.parse(path.read_text()), names):
            counts[(rel, name)] += 1
            where.setdefault((rel, name), []).append(line)
    over = {f"{rel}:{','.join(map(str, where[(rel, n)]))} {n!r}": c for (rel, n), c in counts.items()
            if c > ALLOWED.get((rel, n), (0, ""))[0]}
    assert not over, ("family-name tests outside model/families (ask the family's row instead): "
                      + "; ".join(over))
    unused = [k for k, (c, _) in ALLOWED.items() if counts[k] < c]
    assert not unused, f"allowed sites that are gone (lower their count): {unused}"


def test_allowed_sites_stay_few_and_explained():
    assert sum(c for c, _ in ALLOWED.values()) <= SITE_LIMIT
    assert all(why for _, why in ALLOWED.values())


def test_the_scan_sees_a_family_test():
    names = family_names()
    code = "if model_type == 'gemma2': pass\nx = arch in ('gemma', 'qwen2moe')\nD = {'gpt_oss': 1}\n"
    assert [n for _, n in sites(ast.parse(code), names)] == ["gemma2", "gemma", "qwen2moe", "gpt_oss"]
