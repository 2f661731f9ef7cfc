"""RunDemo's "Compare with…" and "Trace" buttons (issue 25): `mx.compare_runs` of the run cell's
checkpoint against another, or `mx.trace` of it, over the prompt, as jobs on RunDemo's runner (a
background thread; a failure is a sentence in the widget). The result is drawn by the "Compare
runs" view (runs_widget.py) inside the run cell; a click on a cell names its weight and hands
it to `on_select` (set by the Explorer hosting the run cell: its selection moves there).

Both run this checkpoint on `runs_engine`: our decoder ("decoder": numpy, or torch on a GPU), or
llama.cpp's own graph ("llama.cpp", offered for a GGUF when llama-cpp-python loads: its eval
callback). "Compare with…" on llama.cpp with no other checkpoint typed compares this file on
llama.cpp against the same file on our decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import traitlets as t

from ..runs.compare_runs import compare_runs as _compare_runs
from ..runs.engines import DECODER, LLAMACPP
from ..runs.state import pick, runs_state
from ..runs.trace import trace as _trace
from ..runtime.engines.llamacpp_eval import available as _llamacpp_traceable


class RunsJobs(t.HasTraits):
    """RunDemo's "Compare with…" and "Trace" buttons: jobs on RunDemo's runner (`_start`), the
    result drawn by the same view inside the run cell; layers done go to `progress`, and Stop
    (`_stop`) ends the pass between two layers. Needs `source`, `prompt`, `device`."""

    runs = t.Dict().tag(sync=True)
    """The last "Compare with…" or "Trace" result (`runs_state`), or `{}`.

    - Type: `dict`
    - Default: `{}`
    """

    other_source = t.Unicode("").tag(sync=True)
    """The checkpoint "Compare with…" runs against this one (a path, a URL or hf://).

    - Type: `str`
    - Default: `""`
    """

    runs_engines = t.List(t.Unicode(), [DECODER]).tag(sync=True)
    """What "Trace" and "Compare with…" can run this checkpoint on, named as runs/engines.py
    names them: "decoder" (ours: numpy, or torch on a GPU), and "llama.cpp" (its own graph's
    tensors) for a GGUF when llama-cpp-python loads.

    - Type: `list[str]`
    - Default: `["decoder"]`
    """

    runs_engine = t.Unicode(DECODER).tag(sync=True)
    """The one of `runs_engines` they run this checkpoint on (a trace's, side a of a comparison).

    - Type: `str`
    - Default: `"decoder"`
    """

    on_select: Callable[[str], Any] | None = None  # the Explorer's: select a tensor there

    def _offer_runs_engines(self) -> None:
        """llama.cpp beside our decoder where the file is a GGUF and the binding with its eval
        callback loads."""
        gguf = str(self.source).endswith(".gguf")
        self.runs_engines = [DECODER, LLAMACPP] if gguf and _llamacpp_traceable() is None else [DECODER]
        if self.runs_engine not in self.runs_engines:
            self.runs_engine = DECODER

    def _engine(self) -> str | None:
        return LLAMACPP if self.runs_engine == LLAMACPP else None  # None: our decoder, on numpy or torch as the device says

    def compare_runs(self, other: str | None = None) -> bool:
        """Run this checkpoint and `other` (default: `other_source`) on the prompt, point by point."""
        if other is not None:
            self.other_source = str(other)
        return self._start("comparing runs", self._job_compare_runs)

    def trace(self) -> bool:
        """One forward pass of this checkpoint over the prompt, with statistics per layer and module."""
        return self._start("tracing", self._job_trace)

    def _runs_msg(self, content: dict) -> bool:
        """Handle the view's messages; False for anyone else's."""
        kind = content.get("type")
        if kind == "compare_runs":
            if isinstance(content.get("source"), str):
                self.other_source = content["source"]
            self.compare_runs()
        elif kind == "trace":
            self.trace()
        elif kind == "runs_select":
            pick(self, self.runs, content, self.on_select)
        else:
            return False
        return True

    def _runs_device(self) -> str:
        return "cpu" if self.device in ("auto", "cpu") else self.device  # traces need numpy or torch

    def _runs_progress(self, label: str, done: int, total: int) -> bool:
        """Layers done, shown in the run cell's progress bar; False (Stop pressed) ends the pass."""
        self.progress = {"label": label, "done": int(done), "total": int(total)}
        return not self._stop.is_set()

    def _job_compare_runs(self) -> None:
        other = self.other_source.strip() or (self.source if self._engine() == LLAMACPP else "")
        if not other:
            raise ValueError("type the path of the checkpoint to compare with, then press Compare with…")
        self.runs = {}
        self.runs = runs_state(_compare_runs(self.source, other, prompt=self.prompt, device=self._runs_device(),
                                             progress=self._runs_progress, a_engine=self._engine()))

    def _job_trace(self) -> None:
        self.runs = {}
        self.runs = runs_state(_trace(self.source, prompt=self.prompt, device=self._runs_device(),
                                      progress=self._runs_progress, engine=self._engine()))
