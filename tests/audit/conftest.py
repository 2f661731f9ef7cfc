"""A LocalCluster with two worker processes, shared by the audit tests of a module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cluster():
    distributed = pytest.importorskip("dask.distributed")
    pytest.importorskip("pyarrow")
    cl = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50)
    client = distributed.Client(cl)
    yield client
    client.close()
    cl.close()
