"""`read_archive`: a zip or tar that holds model files (a wheel, a zipped model folder, a TorchServe
.mar, a NeMo .nemo): the models inside listed, each openable by its path inside the archive
(`pkg.whl!/pkg/model.pt`), and every pickle inside judged where it lies.

Nothing is extracted to disk. A member that may run code when loaded (a torch checkpoint, a
legacy or tar torch file, a plain pickle, an archive inside the archive) is read by its own reader
on a source that is the member (members.py); what that reader finds comes back here with the
member's name in front, at the archive's bytes for a stored member (its offset in the archive
added) and at the member's header for a compressed one. Tensors are not listed here: open the
member for them.
"""

from __future__ import annotations

import dataclasses

from ...spans import Report, Span, short_repr
from ...units import format_bytes
from ..catalog_note import note
from ..detect import LABELS, identify, member_model_kind
from ..detect_pickle import pickle_prefix
from ..result import FileResult
from .members import Member, MemberError, archive_members, member_head, member_path, open_member

MAX_SNIFFED = 4096  # members whose first bytes are read to say what they are
MAX_DEPTH = 4  # archives inside archives read, from the outside in
MAX_CARRIED_SPANS = 50_000  # byte labels of the members' pickles brought into the archive's map
LISTED = 8  # models named in the finding's message (details list them all)
VERDICTS = ("dangerous", "suspicious", "needs_classes", "safe")


def read_archive(source, depth: int = 0) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    container, members = archive_members(source, rep)
    files = [m for m in members if m.regular]
    models: list[dict] = []
    judged: dict[str, dict] = {}
    for m, kind, pickle in _sniffed(source, files):
        _member_spans(rep, container, m, kind or ("pickle" if pickle else ""))
        if not (kind or pickle):
            continue
        row = {"member": m.name, "path": member_path(source.name, m), "kind": kind or "pickle",
               "label": LABELS.get(kind, kind) if kind else "pickle", "offset": m.data,
               "bytes": m.size, "stored": m.stored, "verdict": None}
        if kind in ("zip", "torch_legacy", "torch_tar") or pickle:
            _judge(source, m, row, rep, judged, depth)
        if kind:
            models.append(row)
        else:
            judged.setdefault(row["path"], row)
    if len(files) > MAX_SNIFFED:
        note(rep, "archive_members_unchecked", f"The archive holds {len(files):,} files; the first "
             f"{MAX_SNIFFED:,} were checked for models and pickles, the rest were not.", 0, min(4, source.size))
    if models:
        shown = "; ".join(f"{r['member']} ({r['label']}, {format_bytes(r['bytes'])}, "
                          f"{'stored at byte ' + format(r['offset'], ',') if r['stored'] else 'compressed'})"
                          for r in models[:LISTED])
        more = f"; and {len(models) - LISTED} more" if len(models) > LISTED else ""
        note(rep, "archive_models", f"The {container} archive holds {len(models)} model file(s): "
             f"{shown}{more}. Open one by its path inside the archive, e.g. "
             f"mx.open({models[0]['path']!r}).", 0, min(4, source.size))
    else:
        note(rep, "archive_models", f"The {container} archive holds no model file among the members "
                 "checked; its pickles, if any, are judged below.", 0, min(4, source.size))
    result.details["archive"] = {"container": container, "members": len(members), "models": models,
                                 "pickles": [r for r in judged.values() if r["kind"] == "pickle"]}
    rows = [r for r in models + list(judged.values()) if r.get("verdict")]
    if rows:
        result.details["pickle"] = _pickle_summary(rows)
    rep.spans.sort(key=lambda s: (s.offset, -s.length))
    return result


def model_paths(source) -> list[str]:
    """The paths (ARCHIVE!/MEMBER) of the models an archive holds, in archive order: what an
    audit opens besides the archive itself."""
    _, members = archive_members(source, Report(source.name))
    return [member_path(source.name, m) for m, kind, _ in _sniffed(source, [m for m in members if m.regular])
            if kind]


def _sniffed(source, files: list[Member]):
    """(member, its model kind or "", whether it is a pickle) of the first MAX_SNIFFED files."""
    for m in files[:MAX_SNIFFED]:
        head = member_head(source, m)
        kind = member_model_kind(head, m.name, m.size)
        yield m, kind, not kind and bool(head) and pickle_prefix(head, max(m.size, len(head) + 1)).is_pickle


def _member_spans(rep: Report, container: str, m: Member, kind: str) -> None:
    what = LABELS.get(kind, kind) if kind else "member"
    rep.span(m.header, m.data - m.header, f"{container}_header", f"{container} > {m.name} > header",
             f"{m.name}, {m.how}")
    if m.stored_size:
        rep.span(m.data, m.stored_size, "member", f"{container} > {m.name}",
                 f"{what}, {format_bytes(m.size)}" + ("" if m.stored else f" ({m.how})"))


def _judge(source, m: Member, row: dict, rep: Report, judged: dict, depth: int) -> None:
    """Read a member that may run code when loaded with its own reader; its findings and byte
    labels come back into `rep`, its verdict into `row`."""
    try:
        if depth >= MAX_DEPTH:
            raise MemberError(f"{m.name!r} is an archive nested {MAX_DEPTH} deep, and deeper ones "
                              "are not read")
        sub = open_member(source, m)
        reader = _reader(sub, depth)
    except MemberError as e:
        note(rep, "archive_member_unread", f"{e}; it was not checked, so whatever it would run "
             "when loaded is unknown.", m.header, m.data - m.header)
        row["verdict"] = "suspicious"
        return
    if reader is None:
        return
    if reader.__name__ == "read_nested":  # a .nemo or a zip of models inside the archive
        row["kind"], row["label"] = "archive", LABELS["model_archive"]
    try:
        got = reader(sub)
    except Exception as e:  # noqa: BLE001 - a member's reader failing is a finding, as in assemble
        note(rep, "archive_member_unread", f"Reading {m.name!r} failed with {type(e).__name__}: "
             f"{str(e)[:200]}; it was not checked (a bug in model_explorer).", m.header, m.data - m.header)
        row["verdict"] = "suspicious"
        return
    _carry(rep, got, m)
    pickle = got.details.get("pickle")
    if pickle:
        row["verdict"] = pickle["verdict"]
        row["imports"] = [dict(r, offset=_at(m, r.get("offset"))) for r in pickle.get("imports", [])]
    inner = got.details.get("archive")
    if inner:  # an archive inside: its models and pickles are paths inside this one's member
        row["models"] = inner["models"]
        for r in inner["pickles"]:
            judged.setdefault(r["path"], r)
    row["tensors"] = len(got.tensors)


def _reader(sub, depth: int):
    """The reader of a member that may run code when loaded, from what its bytes are."""
    from .. import pytorch
    from ..pytorch.tar import read_torch_tar

    def read_nested(s):
        return read_archive(s, depth + 1)

    reads_as = identify(sub.read, sub.size, sub.name).reads_as
    return {"zip": pytorch.read_torch_zip, "torch_legacy": pytorch.read_torch_legacy,
            "pickle": pytorch.read_pickle, "torch_tar": read_torch_tar,
            "archive": read_nested}.get(reads_as)


def _at(m: Member, offset: int | None) -> int | None:
    """A member's byte in the archive: shifted for a stored member, its header for another."""
    if offset is None:
        return None
    return m.data + offset if m.stored else m.header


def _carry(rep: Report, got: FileResult, m: Member) -> None:
    for f in got.report.findings:
        if m.stored:  # the message's own byte numbers count from the member's first byte
            where = f" (bytes named here count from the member's start, archive byte {m.data:,})" \
                if " byte" in f.message else ""
        else:
            where = "" if f.offset is None else f" (byte {f.offset:,} of the inflated member)"
        rep.findings.append(dataclasses.replace(
            f, message=f"{short_repr(m.name, 80)}: {f.message}{where}", offset=_at(m, f.offset),
            length=f.length if m.stored else (None if f.offset is None else m.data - m.header),
            file=rep.file, extra=dict(f.extra, member=m.name)))
    if not m.stored:
        return
    room = MAX_CARRIED_SPANS - len(rep.spans)
    for s in got.report.spans[:max(0, room)]:
        rep.spans.append(Span(s.offset + m.data, s.length, s.kind, f"{m.name} > {s.path}", rep.file,
                              s.value, s.tensor))


def _pickle_summary(rows: list[dict]) -> dict:
    """The archive's pickle verdict, the worst of its members', with their imports (each row
    names its member; offsets in the archive)."""
    worst = min((r["verdict"] for r in rows), key=lambda v: VERDICTS.index(v) if v in VERDICTS else 0)
    imports = [dict(i, member=r["member"]) for r in rows for i in r.get("imports", [])]
    return {"verdict": worst, "imports": imports, "imports_total": len(imports), "structure": None,
            "opcode_count": 0, "pickle_offset": 0, "pickle_length": 0, "protocol": None,
            "pickles": [], "members": {r["path"]: r["verdict"] for r in rows}}
