"""benchmarks/bench_trace.py still runs (its --small mode, in a fresh process), the way
tests/house/test_benchmarks_run.py smoke-runs the other benchmarks."""

from __future__ import annotations

import pytest
from house.test_benchmarks_run import test_benchmark_runs as smoke_run


@pytest.mark.slow
def test_bench_trace_runs():
    smoke_run(["bench_trace.py", "--small"])
