"""Audits of many models and exact scans of big ones, on Dask (the `audit` extra).

    models, findings = mx.audit(["models/", "hf://org/repo"], out="results.parquet",
                                sarif="results.sarif", html="report.html")
    table = mx.scan("DeepSeek-V3/", client=Client("tcp://scheduler:8786"))
    mx.plot_layers(table, stat="norm")
"""

from __future__ import annotations

from .deepscan import scan
from .runner import AuditResult, audit

__all__ = ["AuditResult", "audit", "scan"]

