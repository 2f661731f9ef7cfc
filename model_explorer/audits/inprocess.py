"""Tasks run at once in this process, in place of a Dask cluster: `mx.audit(..., workers=0)`.

The same task functions and the same client-side assembly (runner.py) run either way; only the
futures differ. Useful without the Dask extra, for a handful of models, and in tests.
"""

from __future__ import annotations

from collections import deque


class Done:
    """A task already run: its result, or the exception it raised."""

    def __init__(self, fn, args) -> None:
        self._error: BaseException | None = None
        self._value = None
        try:
            self._value = fn(*args)
        except Exception as e:  # noqa: BLE001 - given back by result(), as a Dask future does
            self._error = e

    def result(self):
        if self._error is not None:
            raise self._error
        return self._value

    def release(self) -> None:
        pass


class InProcess:
    """The part of dask.distributed.Client the audit uses."""

    dashboard_link = None

    def submit(self, fn, *args, pure: bool = True, key: str | None = None) -> Done:
        return Done(fn, args)

    def nthreads(self) -> dict[str, int]:
        return {"in-process": 1}

    def close(self) -> None:
        pass


class _Completed:
    """Done futures in the order submitted, with the ones added on the way."""

    def __init__(self, futures) -> None:
        self._queue = deque(futures)

    def add(self, future: Done) -> None:
        self._queue.append(future)

    def __iter__(self):
        while self._queue:
            yield self._queue.popleft()


def as_completed(client, futures):
    """dask.distributed.as_completed, or its in-process stand-in."""
    if isinstance(client, InProcess):
        return _Completed(futures)
    from dask.distributed import as_completed as dask_completed

    return dask_completed(futures)
