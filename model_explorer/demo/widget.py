"""`RunDemo`: the run cell as a widget: dequantize, generate with streamed tokens, compare.

    mx.RunDemo()                      # the bundled SmolLM2 sample
    mx.RunDemo("model.gguf", device="cpu")

The buttons send custom messages ("dequantize", "generate", "compare", "stop"); each job runs
in a background thread so the kernel keeps serving comms, and streams progress and tokens back
with `send`. Final results also land in synced traits, so a re-rendered view shows them.
Notebook code can do the same with `w.generate()`, `w.dequantize()`, `w.compare()`, `w.wait()`.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets as t

from ..assets import MISSING_BUILD, asset

_LAYER = re.compile(r"^(?:blk|model\.layers)\.(\d+)\.")


class _Stopped(Exception):
    """Raised inside the token stream when the user pressed Stop."""


def layer_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-tensor dequantize rows summed per layer ("embeddings / head" for the rest), in order."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        m = _LAYER.match(r["name"])
        key = f"layer {m[1]}" if m else "embeddings / head"
        g = groups.setdefault(key, {"layer": key, "tensors": 0, "dtypes": [], "quantized_bytes": 0,
                                    "dequantized_bytes": 0, "seconds": 0.0})
        g["tensors"] += 1
        if r["dtype"] not in g["dtypes"]:
            g["dtypes"].append(r["dtype"])
        g["quantized_bytes"] += int(r["quantized_bytes"])
        g["dequantized_bytes"] += int(r["dequantized_bytes"])
        g["seconds"] += float(r["seconds"])
    return list(groups.values())


class RunDemo(anywidget.AnyWidget):
    _esm = asset("run_demo_widget.js", MISSING_BUILD)

    source_label = t.Unicode("").tag(sync=True)
    devices = t.List(t.Unicode()).tag(sync=True)
    device = t.Unicode("auto").tag(sync=True)
    prompt = t.Unicode("What is the capital of France?").tag(sync=True)
    chat = t.Bool(True).tag(sync=True)
    max_new_tokens = t.Int(48).tag(sync=True)
    temperature = t.Float(0.0).tag(sync=True)
    # "idle" | "loading" | "generating" | "converting" | "comparing" | "error"
    status = t.Unicode("idle").tag(sync=True)
    busy = t.Bool(False).tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    output = t.Unicode("").tag(sync=True)
    stats = t.Dict().tag(sync=True)  # tokens/s, prefill, device, peak memory, load time
    progress = t.Dict().tag(sync=True)  # {"label", "done", "total"}
    dequant = t.List().tag(sync=True)  # per-layer rows, see layer_table
    dequant_summary = t.Unicode("").tag(sync=True)
    comparison = t.Dict().tag(sync=True)  # Comparison.to_dict()

    def __init__(self, source: str | os.PathLike | None = None, device: str = "auto",
                 cache_dir: str | None = None, **kwargs) -> None:
        from ..samples import sample_path
        from . import available_devices

        path = os.fspath(source) if source is not None else sample_path()
        devices = ["auto", *[d for d in available_devices() if d != "auto"]]
        super().__init__(source_label=os.path.basename(os.path.normpath(path)), devices=devices,
                         device=device if device in devices else "auto", **kwargs)
        self.source = path
        self.cache_dir = cache_dir
        self._model = None
        self._model_key: tuple | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.on_msg(self._on_msg)

    # -- messages from the browser ---------------------------------------------------------------

    def _on_msg(self, _widget, content, _buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "stop":
            self.stop()
            return
        action = {"dequantize": self.dequantize, "generate": self.generate, "compare": self.compare}.get(kind)
        if action is not None:
            action()

    # -- public actions (each starts a background job; wait() joins it) ----------------------------

    def dequantize(self) -> bool:
        """Load (and so dequantize) the model on the chosen device, with per-layer timings."""
        return self._start("loading", self._job_dequantize)

    def generate(self) -> bool:
        """Generate from `prompt` with the current settings, streaming tokens."""
        return self._start("generating", self._job_generate)

    def compare(self) -> bool:
        """The same prompt on the shipped model and its Q8_0 / F16 conversions."""
        return self._start("comparing", self._job_compare)

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running job ends; True when nothing is running any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    # -- the job runner ----------------------------------------------------------------------------

    def _start(self, status: str, job: Callable[[], None]) -> bool:
        with self._lock:
            if self.busy:
                self.send({"type": "notice", "message": f"Still {self.status}; press Stop or wait."})
                return False
            self.busy, self.status, self.error = True, status, ""
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(job,), daemon=True,
                                            name=f"RunDemo-{status}")
        self._thread.start()
        return True

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
            self.status = "idle"
        except _Stopped:
            self.status = "idle"
            self.send({"type": "notice", "message": "Stopped."})
        except Exception as e:  # shown in the widget, not only in the log
            self.error = f"{type(e).__name__}: {e}"
            self.status = "error"
            self.send({"type": "error", "message": self.error})
        finally:
            self.progress = {}
            self.busy = False

    def _model_for_settings(self):
        key = (self.source, self.device)
        if self._model is None or self._model_key != key:
            self._model = None  # free the previous one first
            self._job_load()
        return self._model

    def _job_load(self) -> None:
        from . import load_model

        self.status = "loading"
        self.dequant, self.dequant_summary = [], ""
        self.progress = {"label": "dequantizing", "done": 0, "total": 0}
        last = [0.0]

        def progress(done: int, total: int, _name: str) -> None:
            now = time.perf_counter()
            if done == total or now - last[0] > 0.05:  # a few updates a second are plenty
                last[0] = now
                self.progress = {"label": "dequantizing", "done": int(done), "total": int(total)}

        model = load_model(self.source, self.device, progress=progress)
        self._model, self._model_key = model, (self.source, self.device)
        report = model.dequant
        self.dequant = layer_table(report.to_records())
        self.dequant_summary = report.summary()
        self.stats = {"device": model.device, "load_seconds": model.load_seconds}

    def _job_dequantize(self) -> None:
        self._model = None
        self._job_load()

    def _job_generate(self) -> None:
        model = self._model_for_settings()
        self.status = "generating"
        self.output = ""
        self.send({"type": "generate_start"})
        pieces: list[str] = []
        started = time.perf_counter()

        def stream(piece: str) -> bool:
            pieces.append(piece)
            elapsed = time.perf_counter() - started
            self.send({"type": "token", "text": piece, "count": len(pieces),
                       "tps": len(pieces) / elapsed if elapsed > 0 else 0.0})
            return not self._stop.is_set()  # False ends generation after this token

        r = model.generate(self.prompt, max_new_tokens=max(1, int(self.max_new_tokens)),
                           temperature=max(0.0, float(self.temperature)), chat=self.chat, stream=stream)
        self.output = r.text
        self.stats = {"device": r.device, "tokens": len(r.tokens), "prompt_tokens": len(r.prompt_tokens),
                      "decode_tps": r.decode_tps, "prefill_tps": r.prefill_tps,
                      "peak_memory_bytes": r.peak_memory_bytes, "load_seconds": model.load_seconds,
                      "stop_reason": r.stop_reason}
        self.send({"type": "generate_done", "stats": self.stats, "text": r.text})
        if r.stop_reason == "stopped":
            self.send({"type": "notice", "message": "Stopped."})

    def _job_compare(self) -> None:
        from .compare import compare_quantizations

        self.comparison = {}

        def on_event(event: dict) -> None:
            kind = event["type"]
            if kind == "convert_start":
                self.status = "converting"
            elif kind == "convert_progress":
                self.progress = {"label": f"converting to {event['dtype']}", "done": event["done"],
                                 "total": event["total"]}
            elif kind == "variant_start":
                self.status = "comparing"
                self.progress = {}
            if kind == "token" and self._stop.is_set():
                raise _Stopped()
            if kind != "convert_progress" or event["done"] == event["total"] or event["done"] % 16 == 0:
                self.send({"type": "compare_event", "event": _jsonable(event)})

        result = compare_quantizations(self.source, self.prompt, max(1, int(self.max_new_tokens)),
                                       chat=self.chat, device=self.device, cache_dir=self.cache_dir,
                                       on_event=on_event, should_stop=self._stop.is_set)
        self.comparison = _jsonable(result.to_dict())


def _jsonable(value):
    """NaN and infinity are not JSON: send them as None."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
