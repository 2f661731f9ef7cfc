"""Attack pickles that start in ways no list of first bytes foresees (issue 43), rebuilt here
from the shapes of the peers' test files (their files are not shipped): modelscan's and
picklescan's text pickle that reaches os.system through the memo and STACK_GLOBAL (with and
without garbage after its STOP), picklescan's GLOBAL-first pickle that breaks off in garbage,
its STRING-first STACK_GLOBAL, fickling's MARK-first pty call and builtins bypass; and the
containers that hide a pickle under another name (a zip member not called data.pkl, a tar
member, a plain pickle inside torch.storage._load_from_bytes). Each would create `marker` if
pickle.load ran it (the broken one imports exec and then fails)."""

from __future__ import annotations

import io
import pickle
import tarfile
import zipfile

from .helpers import Reducer, touch_command


def odd_start_pickles(marker) -> dict[str, bytes]:
    """Name -> the bytes of a pickle file whose first opcode is not PROTO."""
    cmd = touch_command(marker).encode()
    via_memo = (b"Vos\np2\n0Vsystem\np3\n0Vtorch\np0\n0VLongStorage\np1\n0g2\ng3\n\x93(V" + cmd
                + b"\ntR.")
    return {
        "unicode_first": via_memo,  # 56 6f 73 0a: UNICODE, PUT, POP, ..., STACK_GLOBAL
        "unicode_first_garbage": via_memo + b"\n\n\t\t",
        "global_first_broken": (b"cbuiltins\nexec\n(X>\nf = open('x', 'a'); f.write('m'); f.close()"
                                b"\ntRX."),  # BINUNICODE with a length no file has
        "string_first": b"S'os'\nS'system'\n\x93S'" + cmd + b"'\n\x85R.",
        "mark_first": b"(cos\nsystem\nS'" + cmd + b"'\no.",
        # fickling's spelling: STRING with no newline, so pickle.load imports eval, then fails
        "global_then_unterminated_string": b"cbuiltins\neval\nS\"print('x')\"\x85R.",
        "builtins_import_bypass": (b"cbuiltins\n__import__\nS'os'\n\x85Rp0\n0cbuiltins\ngetattr\n"
                                   b"g0\nS'system'\n\x86Rp1\n0g1\nS'" + cmd + b"'\n\x85R."),
    }


def archive_pickles(marker) -> dict[str, bytes]:
    """Name -> an archive or pickle that hides a hostile pickle where a loader still finds it."""
    import torch.storage

    payload = pickle.dumps(Reducer(__import__("os").system, (touch_command(marker),)), protocol=4)
    out = {}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:  # picklescan's malicious1_wrong_ext.zip
        z.writestr("data.txt", payload)
    out["wrong_ext.zip"] = buf.getvalue()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.md", b"# a model\n")
        z.writestr("model/weights.bin", payload)
    out["deflated_member.zip"] = buf.getvalue()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("model/weights.bin")
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    out["member.tar"] = buf.getvalue()
    out["load_from_bytes.pkl"] = pickle.dumps(
        Reducer(torch.storage._load_from_bytes, (payload,)), protocol=2)
    return out
