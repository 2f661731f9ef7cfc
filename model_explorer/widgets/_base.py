"""What every view shares: the checkpoint, the synced state, and the request/answer channel.

The browser asks for pages of bytes, rows of the tree or table, statistics, through custom
messages `{type: "req", id, op, args}`; the kernel answers `{type: "res", id, ok, data}` with
raw bytes as a binary buffer. Nothing large ever sits in a synced trait.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

import anywidget
import traitlets

from ..assets import MISSING_BUILD, asset
from ..checkpoint import Checkpoint
from ..formats.truncation import end_note, size_words, stored_bytes
from ..hexview import SpanIndex
from ..model.sidefiles import finding_files
from ..opener import as_checkpoint
from ..safe_text import escape_deep, unescape_deep
from ..tensors.partial import partial_stats
from ._fixes import FixOps
from ._model import ModelOps
from ._overview import overview
from ._pages import MAX_PAGE, PAGE, explain, page, span_json
from ._safe import SafeState

MAX_FINDINGS_SENT = 1000


class BaseView(FixOps, ModelOps, SafeState, anywidget.AnyWidget):
    """An anywidget over one Checkpoint; subclasses pick which view the JavaScript draws.

    Takes a path, URL or `Checkpoint`, and, as keywords, only the traits listed in
    `_init_traits` (any other keyword is a TypeError, so a typo never passes silently).
    """

    _esm = asset("explorer_widget.js", MISSING_BUILD)
    _css = asset("explorer_widget.css")
    _view = "explorer"
    # Keywords a caller may pass; the other traits are computed from the checkpoint.
    _init_traits: tuple[str, ...] = ("selection", "layout")

    view = traitlets.Unicode("explorer").tag(sync=True)
    """Which view the JavaScript draws: "explorer", "hexdump", "tree", "shardmap", "histogram"
    or "findings". Set by each widget class.

    - Type: `str`
    - Default: `"explorer"`
    """

    summary = traitlets.Dict().tag(sync=True)
    """Format, files, size, tensor and parameter counts, dtype mix, finding counts and the
    overview rows (architecture, quantization, top metadata), computed when the widget opens.

    - Type: `dict`
    - Default: `{}` (filled from the checkpoint)
    """

    findings = traitlets.List().tag(sync=True)
    """The first 1,000 findings as dicts (`Finding.to_dict()`); `summary["finding_total"]`
    says how many there are in all.

    - Type: `list[dict]`
    - Default: `[]` (filled from the checkpoint)
    """

    legend = traitlets.List().tag(sync=True)
    """The span kinds present (magic, json, tensor_data, ...), for the hexdump's colour legend.

    - Type: `list[str]`
    - Default: `[]` (filled from the checkpoint)
    """

    files = traitlets.List().tag(sync=True)
    """The files the hexdump can show: `{"file", "name", "size"}` each, in checkpoint order,
    plus a shard index when findings point into it.

    - Type: `list[dict]`
    - Default: `[]` (filled from the checkpoint)
    """

    first_page = traitlets.Dict().tag(sync=True)
    """The hexdump's first page of the first file (the JSON half of a "bytes" answer), sent
    with the state so the first bytes are drawn without a round trip to the kernel.

    - Type: `dict`
    - Default: `{}` (filled from the checkpoint)
    """

    first_bytes = traitlets.Bytes(b"").tag(sync=True)
    """The raw bytes `first_page` describes (at most 4 KB), sent as a binary buffer.

    - Type: `bytes`
    - Default: `b""` (filled from the checkpoint)
    """

    selection = traitlets.Dict().tag(sync=True)
    """What is selected, shared by every view: `{"tensor", "file", "offset", "length"}`.

    Set it from Python to drive the views: `{"tensor": name}` alone is completed with the
    tensor's file, first byte and length, so the hexdump, table, tree, map and histogram all
    move to it. An unknown tensor name is a `traitlets.TraitError`.

    - Type: `dict`
    - Default: `{}` (nothing selected)
    """

    def __init__(self, source: Any, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(self._init_traits))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                            f"{unknown[0]!r}; it takes a source and "
                            f"{', '.join(self._init_traits)}.")
        selection = kwargs.pop("selection", None)
        ckpt = as_checkpoint(source)
        self.checkpoint = ckpt
        self._file_spans: dict[str, SpanIndex] = {}
        state = initial_state(ckpt)
        state["first_page"], state["first_bytes"] = self._first_page(state["files"])
        super().__init__(view=self._view, **state, **kwargs)
        self._tree = None
        self._table = None
        self._map = None
        self.on_msg(self._on_request)
        if selection:
            self.selection = selection

    @traitlets.validate("selection")
    def _complete_selection(self, proposal) -> dict:
        """A tensor named without its bytes gets them, so every view can move to it."""
        sel = dict(proposal["value"] or {})
        name = sel.get("tensor")
        # Selections made in the browser carry "from" and say what they mean (a finding about
        # a missing tensor has no bytes): they are kept as they are.
        if name and sel.get("offset") is None and "from" not in sel:
            found = self._tensor_selection(str(name))
            if found is None:
                raise traitlets.TraitError(f"No tensor named {name!r}; the checkpoint has "
                                           f"{len(self.checkpoint.tensors)} tensors.")
            sel = {**found, **{k: v for k, v in sel.items() if v is not None}}
        return sel

    # -- lazily built views of the checkpoint --------------------------------------------

    def file_spans(self, file: str) -> SpanIndex:
        if file not in self._file_spans:
            self._file_spans[file] = SpanIndex(self.checkpoint.spans_for(file))
        return self._file_spans[file]

    @property
    def tree(self):
        if self._tree is None:
            from ._tree import HeaderTree

            self._tree = HeaderTree(self.checkpoint)
        return self._tree

    @property
    def table(self):
        if self._table is None:
            from ._table import TensorTable

            self._table = TensorTable(self.checkpoint)
        return self._table

    @property
    def file_map(self):
        if self._map is None:
            from ._map import FileMap

            self._map = FileMap(self.checkpoint)
        return self._map

    # -- requests ------------------------------------------------------------------------

    def _on_request(self, _widget, content: Any, _buffers) -> None:
        if not isinstance(content, dict) or content.get("type") != "req":
            return
        rid = content.get("id")
        try:
            args = unescape_deep(content.get("args") or {})  # names as the file spells them
            data, buffers = self.answer(str(content.get("op")), args)
            self.send({"type": "res", "id": rid, "ok": True, "data": data}, buffers or None)
        except Exception as e:  # a view must say why it cannot draw, not leave a spinner
            self.send({"type": "res", "id": rid, "ok": False,
                       "error": f"{type(e).__name__}: {e}",
                       "trace": traceback.format_exc(limit=3)})

    def answer(self, op: str, args: dict) -> tuple[Any, list[bytes] | None]:
        """Answer one request; also callable from Python, which is how the unit tests drive it."""
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise ValueError(f"unknown request {op!r}")
        return handler(**args)

    def _op_ping(self):
        """The browser asks whether anyone is listening (a reopened notebook has no kernel side)."""
        return {"ok": True}, None

    def _file(self, file: str | None) -> str:
        files = [f["file"] for f in self.files]
        if not files:
            raise ValueError("This checkpoint has no readable file.")
        return file if file in files else files[0]

    def _first_page(self, files: list[dict]) -> tuple[dict, bytes]:
        """The answer to the hexdump's first request, or nothing when it cannot be read now
        (the hexdump then asks, and shows why)."""
        if not files:
            return {}, b""
        try:
            data, buffers = self._page_of(files[0], 0, PAGE)
        except Exception:  # an unreadable first file: the request path says why when asked
            return {}, b""
        return data, buffers[0]

    def _op_bytes(self, file: str | None = None, offset: int = 0, length: int = PAGE):
        file = self._file(file)
        return self._page_of(next(f for f in self.files if f["file"] == file), offset, length)

    def _page_of(self, entry: dict, offset: int, length: int) -> tuple[dict, list[bytes]]:
        """Bytes [offset, offset + length) of the file a `files` entry names, with their spans."""
        file, size = entry["file"], entry["size"]
        offset = max(0, min(int(offset), size))
        length = max(0, min(int(length), MAX_PAGE, size - offset))
        data = bytes(self.checkpoint.read_bytes(offset, length, file)) if length else b""
        out = page(self.file_spans(file), data, file, offset)
        out["size"] = size
        return out, [data]

    def _op_step(self, file: str | None = None, index: int | None = None, offset: int | None = None):
        """The span at `index` in file order (or the first at/after `offset`), explained."""
        file = self._file(file)
        fs = self.file_spans(file)
        if not fs.spans:
            return {"count": 0, "index": 0, "span": None, "text": "This file has no labelled spans."}, None
        if index is None:
            index = fs.index_at(int(offset or 0))
        index = max(0, min(int(index), len(fs.spans) - 1))
        s = fs.spans[index]
        return {"count": len(fs.spans), "index": index, "span": span_json(s, index),
                "text": explain(s, self.checkpoint.format)}, None

    def _op_tree(self, expanded=(), query: str = "", start: int = 0, count: int = 100,
                 locate: str | None = None):
        return self.tree.window(list(expanded), query or "", int(start), min(int(count), 500), locate), None

    def _op_table(self, sort: str = "index", desc: bool = False, query: str = "", start: int = 0,
                  count: int = 100, locate: str | None = None):
        return self.table.window(sort, desc, query or "", int(start), min(int(count), 500), locate), None

    def _op_map(self):
        return self.file_map.payload(), None

    def _op_tensor_at(self, file: str, offset: int):
        info = self.file_map.info_at(file, int(offset))
        if info is not None and self.checkpoint.tensors.get(info.name) is not info:  # unused copy
            return {"tensor": info.name, "file": info.file, "offset": info.offset,
                    "length": info.length, "dtype": info.label, "shape": list(info.shape)}, None
        return (self._tensor_selection(info.name) if info else None), None

    def _op_tensor(self, name: str):  # the file map's "missing shard" line asks for its first tensor
        return self._tensor_selection(name), None

    def _tensor_selection(self, name: str) -> dict | None:
        t = self.checkpoint.tensors.get(name)
        if t is None:  # a tensor the index names but no shard holds: its entry in the index
            m = next((m for m in self.checkpoint.index_mismatches if m.name == name), None)
            return None if m is None else {"tensor": name, "file": m.file, "offset": m.offset,
                                           "length": m.length, "note": m.note}
        return {"tensor": t.name, "file": t.file, "offset": t.offset, "length": t.length,
                "dtype": t.label, "shape": list(t.shape)}

    def _op_stats(self, name: str, exact: bool = False, bins: int = 64):
        if name not in self.checkpoint.tensors:
            m = next((m for m in self.checkpoint.index_mismatches if m.name == name), None)
            if m is not None:  # not an error of the view: the bytes are not there to read
                return {"name": name, "note": f"{m.note}: no values to read."}, None
            return {"name": name, "error": f"No tensor named {name!r} in this checkpoint."}, None
        t0 = time.perf_counter()
        try:
            st = self.checkpoint.stats(name, bins=int(bins), exact=bool(exact))
        except ValueError as e:
            # A file cut inside this tensor: the rows or blocks that are there, marked partial.
            st = partial_stats(self.checkpoint, name, bins=int(bins))
            if st is None:
                return {"name": name, "error": str(e)}, None
        except ImportError as e:
            return {"name": name, "error": f"Statistics are not available: {e}"}, None
        out = st.to_dict()
        out["seconds"] = round(time.perf_counter() - t0, 4)
        return out, None

    # -- display without a kernel --------------------------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        from ._static import summary_html, summary_text

        data["text/plain"] = summary_text(self.checkpoint)
        data["text/html"] = summary_html(self.checkpoint)
        return escape_deep(data), meta  # the kernel sends it as UTF-8 JSON

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.checkpoint!r}>"


def initial_state(ckpt: Checkpoint) -> dict[str, Any]:
    """The small state sent when the widget opens: summary, first findings, legend, files."""
    summary = ckpt.summary()
    summary["finding_total"] = len(ckpt.findings)
    summary["names"] = [os.path.basename(f) for f in ckpt.files[:5]]
    summary["files"] = ckpt.files[:5]
    summary["file_count"] = len(ckpt.files)
    summary["dtypes"] = dict(list(summary["dtypes"].items())[:12])
    summary["overview"] = overview(ckpt)
    present, expected = stored_bytes(ckpt)
    summary["size_text"] = size_words(present, expected)  # a cut file says so in the top bar
    summary["cut_short"] = present < expected
    findings = [f.to_dict() for f in ckpt.findings[:MAX_FINDINGS_SENT]]
    # Declared kinds: a lazily opened index builds no file's spans for its legend.
    spans = ckpt.spans
    legend = sorted(spans.kinds() if hasattr(spans, "kinds") else {s.kind for s in spans})
    files = [{"file": f, "name": os.path.basename(f), "size": ckpt.sizes.get(f, 0)} for f in ckpt.files]
    per_file = ckpt.details.get("files") or {}
    for entry in files:  # a file cut short: the hexdump says where it ends and what was expected
        note = end_note(per_file.get(entry["file"]))
        if note:
            entry["end"] = note
    index = ckpt.details.get("index_file")
    if index and index not in ckpt.files:  # shard findings point into the index JSON
        try:
            files.append({"file": index, "name": os.path.basename(index),
                             "size": ckpt.byte_source(index).size})
        except OSError:
            pass
    # Side files are files: a finding in config.json, modeling_*.py, a tokenizer file... shows
    # that file's bytes in the hexdump, and the Files tab lists it.
    pointed: dict[str, int] = {}
    for f in ckpt.findings[:MAX_FINDINGS_SENT]:
        pointed[f.file or ""] = pointed.get(f.file or "", 0) + 1
    for path in finding_files(ckpt, ckpt.findings[:MAX_FINDINGS_SENT]):
        if any(e["file"] == path for e in files):
            continue
        try:
            size = ckpt.byte_source(path).size
        except OSError:
            continue
        files.append({"file": path, "name": os.path.basename(path), "size": size, "side": True,
                      "findings": pointed.get(path, 0)})
    return {"summary": summary, "findings": findings, "legend": legend, "files": files}
