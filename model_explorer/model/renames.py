"""A one-to-one renaming between the tensors a model misses and the ones it does not expect.

A checkpoint written by another codebase often names one module differently in every layer
(`attn.query` for `self_attn.q_proj`, `mlp.fc_in` for `mlp.up_proj`). Such a renaming is safe to
apply only when it is forced: name patterns are compared with the layer number taken out, and a
missing pattern is paired with an unexpected one only when it is the *only* unexpected pattern
found in exactly the same layers with exactly the expected shape in each, and no other missing
pattern could take it. q, k and v misnamed together in a model whose three have one shape stay
unpaired: the shapes cannot tell them apart, and a guess would load the wrong weights.
"""

from __future__ import annotations

import re
from collections import defaultdict

_LAYER = re.compile(r"(?<=\.)(\d+)(?=\.)")
MAX_PATTERNS = 200  # per side: beyond this the names are not one module renamed, stop looking


def _pattern(name: str) -> tuple[str, str]:
    """(name with its first layer number replaced by '#', the number or '')."""
    m = _LAYER.search(name)
    if m is None:
        return name, ""
    return name[:m.start()] + "#" + name[m.end():], m[1]


def _by_pattern(names: dict[str, tuple | None]) -> dict[str, dict[str, tuple | None]]:
    out: dict[str, dict[str, tuple | None]] = defaultdict(dict)
    for name, shape in names.items():
        pat, layer = _pattern(name)
        out[pat][layer] = shape
    return out


def one_to_one(missing: dict[str, tuple | None], unexpected: dict[str, tuple | None]) -> dict[str, str]:
    """{unexpected name: missing name} when the pairing is forced (see the module's docstring);
    `missing` maps each name to its expected shape (None: any), `unexpected` to its stored shape."""
    want, have = _by_pattern(missing), _by_pattern(unexpected)
    if not want or not have or len(want) > MAX_PATTERNS or len(have) > MAX_PATTERNS:
        return {}

    def fits(w: dict, h: dict) -> bool:
        return w.keys() == h.keys() and all(w[k] is None or tuple(w[k]) == tuple(h[k]) for k in w)

    candidates = {wp: [hp for hp, h in have.items() if fits(w, h)] for wp, w in want.items()}
    takers: dict[str, int] = defaultdict(int)
    for hps in candidates.values():
        for hp in hps:
            takers[hp] += 1
    out: dict[str, str] = {}
    for wp, hps in candidates.items():
        if len(hps) != 1 or takers[hps[0]] != 1:
            continue
        hp = hps[0]
        for layer in want[wp]:
            out[hp.replace("#", layer, 1) if layer else hp] = wp.replace("#", layer, 1) if layer else wp
    return out
