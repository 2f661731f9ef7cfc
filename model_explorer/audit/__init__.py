"""Audits of many models and exact scans of big ones, on Dask (the `audit` extra).

    models, findings = mx.audit(["models/", "hf://org/repo"], out="results.parquet",
                                sarif="results.sarif", html="report.html")
    table = mx.scan("DeepSeek-V3/", client=Client("tcp://scheduler:8786"))
    mx.plot_layers(table, stat="norm")
"""

from __future__ import annotations

import sys
import types

from .deepscan import scan
from .runner import AuditResult, audit

__all__ = ["AuditResult", "audit", "scan"]


class _CallableModule(types.ModuleType):
    """Importing model_explorer.audit.anything makes `model_explorer.audit` this package (Python
    sets the attribute on the parent), so `mx.audit(...)` must work on the package too."""

    def __call__(self, *args, **kwargs) -> AuditResult:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
