"""Run inside the notebook's kernel after its cells: press each button of every live run cell
(`RunDemo`) on its model and record what the widget did, so the offline page can replay it.

Every synced result the widget sets (status, progress, output, the dequantize rows, the
comparison, the backends, the trace or compare-runs view) and every message it sends (each
streamed token with its tokens/s) is kept with the seconds since the button was pressed;
`course/static/offline_widgets.js` plays them back at that pace when the reader presses the
same button. The widget is set back as it was afterwards, so the page's saved state shows the
cell as the notebook left it. A button whose run failed or took too long is not recorded and
says on the page that it needs a live kernel.

    rec = RunRecorder()            # every RunDemo alive in this kernel
    rec.press("dequantize"); rec.press("generate"); ...; rec.save(path)
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from typing import Any

from record_answers import _finite

# What the page replays, in the order they are pressed: Dequantize loads the model, so the
# generation after it streams at the pace of generating alone.
ACTIONS = ("dequantize", "generate", "compare", "compare_backends", "trace", "compare_runs")
# The synced traits a job writes (widgets/run_cell.py, run_jobs.py).
RESULTS = ("status", "busy", "error", "output", "stats", "progress", "dequant", "dequant_summary",
           "comparison", "backends", "runs", "other_source", "engine", "family")
# What the cell showed when the button was pressed (a recording may change the first three from
# the cell's own settings), replayed first so the page shows what the run ran with.
SETTINGS = ("device", "max_new_tokens", "other_source", "engine")
ACTION_SECONDS = 300  # a run that takes longer is stopped; the build's cells may take a minute more


def machine() -> str:
    """The build machine in words, without user or host names."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = ""
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB memory"
    except (ValueError, OSError, AttributeError):
        pass
    return f"{platform.system()} {platform.machine()}, {cores} CPU cores ({cpu}){memory}"


def _run_cells() -> list:
    from ipywidgets.widgets.widget import _instances

    from model_explorer.widgets.run_cell import RunDemo

    return [w for w in list(_instances.values()) if isinstance(w, RunDemo)]


class RunRecorder:
    """Presses the run cells' buttons one at a time and keeps what each did."""

    def __init__(self, max_new_tokens: int | None = None) -> None:
        self.cells = _run_cells()
        self.max_new_tokens = max_new_tokens
        self.scratch = tempfile.TemporaryDirectory(prefix="mx-course-runs-")
        self.records: dict[str, dict[str, Any]] = {
            w.model_id: {"machine": machine(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                         "actions": {}, "not_recorded": {}} for w in self.cells}
        self.saved = {w.model_id: {name: getattr(w, name) for name in {*RESULTS, *SETTINGS}}
                      for w in self.cells}

    def press(self, action: str) -> None:
        for w in self.cells:
            record = self.records[w.model_id]
            reason = self._press(w, action, record)
            if reason:
                record["not_recorded"][action] = reason
                print(f"run cell {action}: not recorded ({reason})")

    def _press(self, w, action: str, record: dict) -> str | None:
        if action == "compare_runs":  # against the Q8_0 conversion "Compare quantizations" made
            variants = (w.comparison or {}).get("variants") or []
            other = next((v["path"] for v in variants if v.get("label") == "Q8_0"), None)
            if other is None:
                return "nothing to compare with: Compare quantizations was not recorded"
            w.other_source = other
        if self.max_new_tokens:
            w.max_new_tokens = self.max_new_tokens
        # Dequantize on numpy, whose per-layer table has rows: "auto" picks llama.cpp for a GGUF,
        # which keeps the blocks quantized and so dequantizes nothing. The rest as the cell is set.
        w.device = "cpu" if action == "dequantize" and "cpu" in w.devices else self.saved[w.model_id]["device"]
        w.cache_dir = self.scratch.name  # the conversions are written here, not in the user's cache
        # the settings it ran with come first, so the replayed cell shows them
        events: list[list] = [[0.0, "set", name, getattr(w, name)] for name in SETTINGS]
        t0 = time.perf_counter()

        def on_change(change) -> None:
            events.append([round(time.perf_counter() - t0, 3), "set", change["name"], change["new"]])

        def send(content, buffers=None) -> None:
            events.append([round(time.perf_counter() - t0, 3), "msg", content])

        w.observe(on_change, names=list(RESULTS))
        w.send = send  # the jobs' messages (streamed tokens, notices) come here, timed
        try:
            started = getattr(w, action)()
            if started and not w.wait(ACTION_SECONDS):
                w.stop()
                w.wait()
                return f"it took longer than {ACTION_SECONDS} s when the course was built"
        finally:
            w.unobserve(on_change, names=list(RESULTS))
            del w.send
        if not started:
            return "the run cell was busy when the course was built"
        if w.error:
            return f"it failed when the course was built: {w.error}"
        seconds = round(time.perf_counter() - t0, 3)
        record["actions"][action] = {"seconds": seconds, "device": w.device, "events": _finite(_readable(events))}
        print(f"run cell {action}: recorded ({seconds:.1f} s, {len(events)} events)")
        return None

    def save(self, path: str) -> dict:
        """Write the records and set every run cell back as the notebook left it."""
        for w in self.cells:
            for name, value in self.saved[w.model_id].items():
                setattr(w, name, value)
            w._model = None  # free the loaded model
        self.scratch.cleanup()
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.records, f, default=str, allow_nan=False)
        return {"run_cells": len(self.cells)}


def _readable(events: list[list]) -> list[list]:
    """File paths of the build's scratch conversions shown as their file names."""
    scratch = tempfile.gettempdir().rstrip("/") + "/mx-course-runs-"

    def tidy(value):
        if isinstance(value, str) and value.startswith(scratch):
            return os.path.basename(value)
        if isinstance(value, dict):
            return {k: tidy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [tidy(v) for v in value]
        return value

    return tidy(events)
