"""Codecs of the Hub quantization schemes (formats/hubquant recognises them): each turns a
logical TensorInfo with a `quant` dict into a Plan, so read, stats and blocks decode it."""

from __future__ import annotations

from . import intpack

PLANNERS = {
    "gptq": intpack.gptq_plan,
    "awq": intpack.awq_plan,
}
