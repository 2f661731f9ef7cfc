"""`read_hdf5`: an HDF5 weight file (transformers' tf_model.h5, a Keras .h5 or .weights.h5) read
without h5py: every dataset a tensor, named as Keras names it, with its absolute byte range when
its data is stored in one piece (contiguous or compact). Chunked or compressed datasets are listed
with dtype and shape; their values are read through h5py, an optional extra, and said so."""

from __future__ import annotations

import math
import re

from ...records import Quant, TensorInfo
from ...spans import Report
from ..catalog_note import note
from ..keras_graph import keras_structure
from ..result import FileResult
from . import messages as m
from .groups import Node, Walker
from .headers import DATASPACE, DATATYPE, EXTERNAL, FILTERS, LAYOUT
from .superblock import read_superblock
from .window import H5Error, Window

MAX_ELEMENTS = 2**62
MAX_SHOWN_NAMES = 40  # names of a Keras layer_names attribute put in the metadata text
_SPLIT_ATTR = re.compile(r"^(layer_names|weight_names)(\d+)$")  # Keras splits attributes over 64 KiB


def read_hdf5(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    read_window(Window(source), result)
    return result


def read_window(win: Window, result: FileResult) -> None:
    """Read the HDF5 file in `win` into `result` (its tensors, metadata, spans, findings)."""
    rep = result.report
    try:
        sb = read_superblock(win, rep)
    except H5Error as e:
        note(rep, e.code, e.message, e.offset, e.length)
        _clip(rep, win)
        return
    if sb.eof > win.size:  # the end-of-file address counts the user block too
        note(rep, "h5_truncated", f"The superblock says the HDF5 data ends at byte {sb.eof}, but the "
             f"file holds only {win.size} bytes: it was cut short.", win.start + sb.at, 8)
    walker = Walker(win, rep)
    walker.walk(sb.root)
    names = _keras_names(walker.nodes)
    chunked: list[TensorInfo] = []
    for node in walker.nodes:
        if node.dataset:
            # the name is settled before the spans and findings are tagged with it: a Keras
            # name another dataset's path already took falls back to this dataset's own path
            name = names.get(node.path, node.path)
            info = _tensor(node, node.path if name in result.tensors else name, win, result)
            if info is not None:
                result.tensors[info.name] = info
                if info.quant is not None:
                    chunked.append(info)
    if chunked:
        filtered = sorted({f for t in chunked if t.quant is not None for f in t.quant.filters or ()})
        how = f", compressed with {', '.join(filtered)}" if filtered else ""
        note(rep, "h5_chunked", f"{len(chunked)} dataset(s) are stored in chunks{how} (the first: "
             f"{chunked[0].name}); their bytes are not one range of the file, so their values are "
             "read through h5py (an optional extra) and the hexdump shows no data span for them.",
             chunked[0].extra["header_at"], 0, chunked[0].name)
    result.metadata.update(_root_metadata(walker.nodes))
    _keras_graph(walker.nodes, win, result)
    result.details["hdf5"] = {"superblock_version": sb.version, "objects": len(walker.nodes),
                              "datasets": sum(n.dataset for n in walker.nodes), "chunked": len(chunked),
                              "start": win.start}
    _clip(rep, win)


def _keras_graph(nodes: list[Node], win: Window, result: FileResult) -> None:
    """A Keras 2 / legacy .h5 full model: its model_config attribute as the graph (keras_graph.py)."""
    root = next((n for n in nodes if n.path == ""), None)
    attr = root.attributes.get("model_config") if root is not None else None
    if attr is None or not isinstance(attr.value, str):
        return
    length = max(0, min(attr.length, win.start + win.size - attr.at))  # its message's bytes, absolute
    raw = bytes(win.source.read(attr.at, length)) if length else None
    result.structure = keras_structure(attr.value, result.file, (attr.at, length), raw, result.tensors)


def _clip(rep: Report, win: Window) -> None:
    """Spans stay inside the HDF5 data (a superblock cut short is labelled before it is found so)."""
    end = win.start + win.size
    rep.spans[:] = [s for s in rep.spans if s.offset <= end]
    for s in rep.spans:
        s.length = max(0, min(s.length, end - s.offset))
    rep.spans.sort(key=lambda s: s.offset)


def _tensor(node: Node, name: str, win: Window, result: FileResult) -> TensorInfo | None:
    rep = result.report
    msgs = {msg.type: msg for msg in reversed(node.header.messages)}  # the first of each type
    where = "/" + node.path
    at = node.header.at
    try:
        if EXTERNAL in msgs:
            note(rep, "h5_external", f"The dataset {where} keeps its values in another file (an "
                 "external file list); they are not read.", msgs[EXTERNAL].at, len(msgs[EXTERNAL].data), name)
            return None
        if DATASPACE not in msgs or DATATYPE not in msgs:
            raise H5Error("h5_bad_structure", f"The dataset {where} has no "
                          f"{'dataspace' if DATASPACE not in msgs else 'datatype'} message.", at, 0)
        space, kind = msgs[DATASPACE], msgs[DATATYPE]
        if space.shared or kind.shared:
            raise H5Error("h5_unsupported", f"The dataset {where} shares its dataspace or datatype with "
                          "other objects (a committed type); this reader does not follow those.", at, 0)
        shape = m.dataspace(space.data, space.at, win)
        dt = m.datatype(kind.data, kind.at, win)
        layout = m.layout(msgs[LAYOUT], win)
        pipeline = m.filters(msgs[FILTERS], win) if FILTERS in msgs else []
    except H5Error as e:
        note(rep, e.code, f"{where}: {e.message}" if not e.message.startswith("The dataset") else e.message,
             e.offset, e.length, name)
        return None
    if shape is None:
        return None  # a null dataspace: no values at all
    if dt.dtype is None:
        note(rep, "h5_dtype_not_read", f"The dataset {where} holds {dt.words} values; only numeric "
             "types (integers, float16/32/64, bfloat16, bool) are read as tensors.", kind.at, len(kind.data), name)
        return None
    numel = math.prod(shape)
    if numel > MAX_ELEMENTS:
        note(rep, "h5_too_large", f"The dataset {where} claims shape {list(shape)}: more elements than "
             "any file holds.", space.at, len(space.data), name)
        return None
    need = numel * dt.size
    info = TensorInfo(name, dt.dtype, shape, result.file, 0, need, dt.byteorder,
                      extra={"hdf5_path": where, "layout": layout.kind, "header_at": at})
    if layout.kind == "compact":
        info.offset, info.length = layout.compact_at, layout.compact_size
        if layout.compact_size != need:
            note(rep, "h5_size_mismatch", f"The dataset {where} is {dt.dtype} {list(shape)}, which needs "
                 f"{need} bytes, but its compact data holds {layout.compact_size}.", layout.compact_at, 0, name)
    elif layout.kind == "contiguous":
        if layout.address == -1:
            note(rep, "h5_no_data", f"The dataset {where} was created but its values never written "
                 "(no data address): reading it gives its fill value.", msgs[LAYOUT].at, len(msgs[LAYOUT].data), name)
            return None
        info.offset = win.absolute(layout.address)
        if layout.size is not None and layout.size != need:
            note(rep, "h5_size_mismatch", f"The dataset {where} is {dt.dtype} {list(shape)}, which needs "
                 f"{need} bytes, but its layout says {layout.size}.", msgs[LAYOUT].at, len(msgs[LAYOUT].data), name)
        if not win.inside(layout.address, need):
            note(rep, "h5_address_past_end", f"The values of {where} ({need} bytes at address "
                 f"{layout.address}) run past the end of the HDF5 data ({win.size} bytes): the file is "
                 "truncated or the address is damaged.", msgs[LAYOUT].at, len(msgs[LAYOUT].data), name)
    elif layout.kind == "chunked":
        info.offset, info.length = at, 0  # no byte range: the bytes are chunks, maybe compressed
        info.quant = Quant(codec="h5py_dataset", label=dt.dtype, dataset=where,
                           window=(win.start, win.size), filters=tuple(pipeline))
        return info
    else:
        note(rep, "h5_unsupported", f"The dataset {where} has a {layout.kind} layout, which this "
             "reader does not read.", msgs[LAYOUT].at, len(msgs[LAYOUT].data), name)
        return None
    shown = min(info.length, max(0, win.start + win.size - info.offset))
    rep.span(info.offset, shown, "tensor_data", "data > " + name, f"{dt.dtype} {list(shape)}", name)
    return info


def _keras_names(nodes: list[Node]) -> dict[str, str]:
    """Dataset path -> the weight name Keras gave it (a layer group's weight_names attribute:
    tf_bert_model/bert/embeddings/word_embeddings/weight:0), when it names that dataset."""
    paths = {n.path for n in nodes if n.dataset}
    out: dict[str, str] = {}
    for node in nodes:
        if node.dataset:
            continue
        for weight in _listed(node, "weight_names"):
            path = f"{node.path}/{weight}" if node.path else weight
            if path in paths and weight not in out.values():
                out[path] = weight
    return out


def _listed(node: Node, key: str) -> list[str]:
    """A Keras list attribute, joined again when Keras split it (weight_names0, weight_names1...)."""
    attr = node.attributes.get(key)
    if attr is not None:
        return [v for v in attr.value if isinstance(v, str)] if isinstance(attr.value, list) else []
    parts = sorted((int(mt.group(2)), a) for k, a in node.attributes.items()
                   if (mt := _SPLIT_ATTR.match(k)) and mt.group(1) == key)
    return [v for _, a in parts if isinstance(a.value, list) for v in a.value if isinstance(v, str)]


def _root_metadata(nodes: list[Node]) -> dict[str, str]:
    root = next((n for n in nodes if n.path == ""), None)
    if root is None:
        return {}
    out: dict[str, str] = {}
    for key, attr in root.attributes.items():
        if _SPLIT_ATTR.match(key) or key in ("layer_names", "weight_names"):
            continue
        out[key] = _text(attr)
    layers = _listed(root, "layer_names")
    if layers:
        more = f" … ({len(layers)} in all)" if len(layers) > MAX_SHOWN_NAMES else ""
        out["layer_names"] = ", ".join(layers[:MAX_SHOWN_NAMES]) + more
    return out


def _text(attr: m.Attribute) -> str:
    value = attr.value
    if value is None:
        return f"(not read: {attr.words})"
    if isinstance(value, list):
        shown = ", ".join(str(v) for v in value[:MAX_SHOWN_NAMES])
        return shown + (f" … ({len(value)} in all)" if len(value) > MAX_SHOWN_NAMES else "")
    return str(value)
