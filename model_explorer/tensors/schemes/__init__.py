"""Codecs of the Hub quantization schemes (formats/hubquant recognises them): each turns a
logical TensorInfo with a `quant` dict into a Plan, so read, stats and blocks decode it."""

from __future__ import annotations

from ..read import PLANNERS
from . import bnb4, intpack, scaled

PLANNERS.update({
    "gptq": intpack.gptq_plan,
    "awq": intpack.awq_plan,
    "fp8_block": scaled.fp8_block_plan,
    "ct_float": scaled.ct_plan,
    "ct_int": scaled.ct_plan,
    "ct_pack": scaled.ct_plan,
    "ct_nvfp4": scaled.ct_plan,
    "ct_mxfp4": scaled.ct_plan,
    "bnb_int8": scaled.bnb_int8_plan,
    "bnb_4bit": bnb4.bnb4_plan,
    "mxfp4": scaled.mxfp4_plan,
})
