"""What a comparison of two runs concludes (run_diff.RunDiff.verdict): agree, drift or jump.

The runs agree when their logits are equal within float32 noise: every position's most likely
next token the same and KL(P_a || P_b) at most NOISE_KLD nats at every position. Then there is no
divergence, whatever the activations did on the way.

When the logits differ, the points are walked in the order the decoder computes them, and the
first whose relative L2 error ||b - a|| / ||a|| leaves float noise (above NOISE_REL) is where the
difference starts. It is a **jump** when it steps up from float noise to at least STEP_MIN while
an earlier point agreed (a wrong weight, a RoPE base, a norm epsilon: exact before, clearly off
after, however small the step), unless the weight feeding it is merely stored another way in b
(F32 against Q8_0, BF16): rounding, a drift. It is a **drift** when the difference is there from
the very first point or grows from rounding: quantization, a lower precision, a small change to
every weight. A drift can still end in a jump further on: a point at least JUMP_FLOOR and
JUMP_FACTOR times the largest error before it (or NaN/Inf in one run only) is one.

The floors were measured on float32 runs of one model that differ only in rounding: the numpy
and torch engines, and a copy whose MLP channels are reordered (the same sums in another order).
On a tiny random Llama (4 layers, 16 tokens) the largest relative L2 of any point is 1.7e-6 and
the largest KLD 1.3e-11 nats; on the bundled SmolLM2-135M (30 layers, 20 tokens) 2.3e-6 and
8.7e-11. NOISE_REL sits 4x above, NOISE_KLD 100x above.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from .config_diff import config_text

NOISE_REL = 1e-5    # relative L2 at or below this is float32 rounding
NOISE_KLD = 1e-8    # nats: KL at or below this at every position is float32 rounding
STEP_MIN = 1e-4     # a step up from float noise to at least this (10x NOISE_REL) is a jump
JUMP_FLOOR = 0.25   # after a drift, a jump is at least this (about cosine 0.97) ...
JUMP_FACTOR = 4.0   # ... and this many times the largest error of every earlier point

AGREE, DRIFT, JUMP = "agree", "drift", "jump"


def logits_agree(top1_agreement: float, kld_max: float) -> bool:
    """The logits are equal within float32 noise: same top-1 everywhere, KL at most NOISE_KLD."""
    return top1_agreement == 1.0 and math.isfinite(kld_max) and kld_max <= NOISE_KLD


def find_divergence(rows: list[dict[str, Any]], logits_differ: bool = True) -> tuple[dict[str, Any], str] | None:
    """(row, JUMP or DRIFT) where the runs part (see the module docstring), or None when the
    logits agree or no point leaves float noise. A jump anywhere wins over a drift before it."""
    if not logits_differ:
        return None
    worst, onset, agreed = 0.0, None, False
    for row in rows:
        r = row["rel_l2"]
        if math.isnan(r):
            continue  # not compared
        if onset is None and leaves_noise(row):
            onset = row
            if (agreed and r >= STEP_MIN and not restored(row)) or r >= JUMP_FLOOR:
                return row, JUMP
        elif onset is not None and r >= JUMP_FLOOR and r >= JUMP_FACTOR * worst:
            return row, JUMP
        agreed = agreed or onset is None
        worst = max(worst, r)
    return (onset, DRIFT) if onset is not None else None


def leaves_noise(row: dict[str, Any]) -> bool:
    """The point's relative L2 is above float32 rounding (NaN: not compared, never above)."""
    return row["rel_l2"] > NOISE_REL  # a NaN compares False


def restored(row: dict[str, Any]) -> bool:
    """The weight feeding the point is stored in another kind in b than in a (F32 vs Q8_0)."""
    a, b = row.get("kind_a"), row.get("kind")
    return a is not None and b is not None and a != b


def largest_before(rows: list[dict[str, Any]], row: dict[str, Any]) -> float:
    """The largest relative L2 of the points computed before `row`."""
    before = []
    for r in rows:
        if r is row:
            break
        if not math.isnan(r["rel_l2"]):
            before.append(r["rel_l2"])
    return max(before, default=0.0)


def where(row: dict[str, Any]) -> str:
    return f"layer {row['layer']} {row['module']}" if row["layer"] is not None else row["module"]


# -- explanations ---------------------------------------------------------------------------------

def explain(row: dict[str, Any], rows: list[dict[str, Any]], config_diff: dict[str, list[Any]] | None = None,
            kind: str = JUMP, config_places: dict[str, Any] | None = None) -> str:
    """A sentence on what the divergence at `row` most likely comes from; a differing
    hyperparameter first, with the metadata entry that states it (config_places)."""
    text = _explain_drift(row) if kind == DRIFT else _explain_weights(row, rows, onset(rows) is not row)
    if config_diff:  # the same bytes under two recipes part ways too: say so first
        return (f"the two configurations differ ({config_text(config_diff, config_places)}), which alone can make "
                f"{where(row)} differ; otherwise: {text}")
    return text


def _explain_drift(row: dict[str, Any]) -> str:
    if restored(row):
        return (f"the weight {row['tensor']} is stored as {row['kind']} in b, {row['tensor_a']} as {row['kind_a']} "
                "in a: rounding, which every later point adds a little to (quantization, a lower precision).")
    return ("the difference is there from the first point on and grows slowly: quantization or a lower "
            "precision throughout, or a small change to every weight.")


def _explain_weights(row: dict[str, Any], rows: list[dict[str, Any]], drifted: bool = False) -> str:
    """`drifted`: the points before `row` already differ a little (a drift before the jump), so
    the sentence never says that everything before it agrees."""
    at = where(row)
    before = "far more than the small difference before it" if drifted else "while everything before it agrees"
    its_input = "while its input differs only a little" if drifted else "while its input agrees"
    if math.isinf(row["rel_l2"]):
        return f"NaN or Inf appear at {at} in one run only: look at {row['tensor']} for NaN/Inf values."
    same_layer = {r["module"]: r for r in rows if r["layer"] == row["layer"]}
    small = row["rel_l2"] / JUMP_FACTOR
    inputs_agree = all(same_layer.get(m, {}).get("rel_l2", 0.0) < small for m in ("q", "k", "v"))
    if row["module"] in ("attn_out", "kqv_out") and inputs_agree:
        # kqv_out: llama.cpp's attention before its output projection, so no weight is left to blame
        projection = f", or the output projection {row['tensor']}" if row["module"] == "attn_out" else ""
        return (f"q, k and v of layer {row['layer']} agree but the attention output does not: the attention "
                "itself differs (rope_theta or RoPE scaling, the head layout, the attention scale or "
                f"the mask){projection}.")
    if row["module"] in ("attn_norm", "ffn_norm", "final_norm"):
        head = f"{at} differs far more than its input" if drifted else f"the input of {at} agrees but its output does not"
        return (f"{head}: the norm weight {row['tensor']} or "
                "rms_norm_eps differs.")
    if row["module"] in ("q", "k"):
        return (f"{at} differs {its_input}: the weight {row['tensor']} differs (another "
                "layer's weight, or q/k rows left in llama.cpp's interleaved RoPE order).")
    names = row.get("tensors") or [row["tensor"]]
    which = f"the weight {names[0]}" if len(names) == 1 else f"one of its weights ({', '.join(names)})"
    return f"{at} differs {before}: {which} differs."


# -- sentences ------------------------------------------------------------------------------------

VERDICT_TITLES = {AGREE: "the runs agree", DRIFT: "the runs drift apart", JUMP: "the runs part (a jump)"}


def onset(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first point whose relative L2 leaves float noise (find_divergence's rule)."""
    return next((r for r in rows if leaves_noise(r)), None)


def agreement_sentence(rows: list[dict[str, Any]], top1_agreement: float, kld_max: float) -> str:
    """The verdict when the runs agree: the logits within float noise, and how close the points came."""
    worst = max((r["rel_l2"] for r in rows if not math.isnan(r["rel_l2"])), default=0.0)
    if logits_agree(top1_agreement, kld_max):
        logits = f"top-1 agreement 100%, KLD at most {kld_max:.2g} nats, the float32 noise floor {NOISE_KLD:g}"
    else:  # every point within noise, yet an argmax flipped: a near tie rounded two ways
        logits = (f"no point differs beyond float32 rounding (relative L2 {NOISE_REL:g}); a top-1 that "
                  "differs is a near tie rounded two ways")
    return (f"No divergence: the logits agree within float32 noise ({logits}); the largest relative L2 "
            f"of any point is {worst:.3g}.")


def divergence_sentence(first: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    """What the first divergence is, in one sentence (the summary, the CLI and the view say it)."""
    r, before = first["rel_l2"], first.get("previous_max") or 0.0
    place = f" at byte {first['offset']:,}" if first.get("offset") is not None else ""
    file = f" of {_basename(first['file'])}" if first.get("file") else ""
    why = first.get("explanation") or ""
    why = why[:1].upper() + why[1:]
    if first.get("kind") == DRIFT:
        after = [x["rel_l2"] for x in (rows or [])[_index(rows, first):] if not math.isnan(x["rel_l2"])]
        grows = f", growing to {max(after):.3g}" if after and max(after) > r else ""
        return (f"The runs drift apart from {where(first)} on (relative L2 {r:.3g} there{grows}, with no single "
                f"step): weight {first['tensor']}{place}{file}. {why}")
    if r is None or not math.isfinite(r):
        jump = "NaN/Inf in one run only"
    elif before == 0:
        jump = f"relative L2 {r:.3g} where every earlier point agreed exactly"
    elif before <= NOISE_REL:
        jump = f"relative L2 {r:.3g} where every earlier point agreed within float32 rounding ({before:.2g} at most)"
    else:
        jump = f"relative L2 {r:.3g}, {r / before:,.0f}x the largest before it ({before:.3g})"
    drift = first.get("drift_from")
    also = (f" Before the jump the runs already differ a little, from {where(drift)} on (relative L2 "
            f"{drift['rel_l2']:.2g} there), as rounding or quantization makes them." if drift else "")
    return f"The runs part at {where(first)} ({jump}): weight {first['tensor']}{place}{file}. {why}{also}"


def _index(rows: list[dict[str, Any]] | None, first: dict[str, Any]) -> int:
    key = (first["layer"], first["module"])
    return next((i for i, r in enumerate(rows or []) if (r["layer"], r["module"]) == key), 0)


def _basename(path: str) -> str:
    return os.path.basename(os.path.normpath(str(path))) or str(path)


def tokens_text(tokens: list[str]) -> str:
    """Token texts quoted one by one ("Ġthe" "Ġcat"), escapes shown, never a list."""
    return " ".join(json.dumps(t, ensure_ascii=False) for t in tokens) or "none"


FLAT = 0.9  # entropy at least this share of log(vocabulary): a nearly flat next-token distribution
SMALL_KLD = 0.05  # nats: a KLD at most this is small beside a low top-1 agreement


def top1_note(top1_agreement: float, kld_max: float, flatness: float, vocab: int) -> str:
    """Why a low top-1 agreement sits beside a small KLD: the next-token distribution is nearly flat
    (random weights), so the most likely token leads by a hair and any difference reorders it;
    "" when that is not the case."""
    if top1_agreement >= 1.0 or not math.isfinite(kld_max) or kld_max > SMALL_KLD or flatness < FLAT:
        return ""
    return (f"Top-1 agreement is {top1_agreement:.0%} although the KLD is at most {kld_max:.2g} nats: the "
            f"next-token distribution is nearly flat (its entropy is {flatness:.0%} of the most {vocab:,} "
            "tokens allow, as with random weights), so the most likely token leads by a hair and small "
            "differences reorder it. The KLD is the measure to read here.")
