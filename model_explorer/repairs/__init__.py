"""Repairs: from a diagnosis to a fixed copy, verified, with the original never touched.

    plan = mx.repair_plan("broken-model/")        # what applies, what it changes, what cannot be fixed
    report = mx.repair("broken-model/", "fixed/") # the copy, per-tensor hashes, the output's findings

The package is named `repairs` so that `mx.repair` stays the function.
"""

from __future__ import annotations

from .apply import repair
from .build import RepairError
from .fix import Fix, Unfixable
from .plan import RepairPlan, repair_plan
from .report import RepairReport, TensorHashes

__all__ = ["repair", "repair_plan", "RepairError", "RepairPlan", "RepairReport", "Fix", "Unfixable",
           "TensorHashes"]
