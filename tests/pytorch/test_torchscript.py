"""TorchScript archives (torch.jit.save): verdicts held against torch.jit.load, picklescan and
modelscan.

torch.jit._pickle's helpers are data constructors: the structure read here equals what
torch.jit.load rebuilds, and no archive torch writes for an ordinary module is "dangerous"
(picklescan and modelscan see nothing either). The archive's TorchScript source is checked
as text: code that writes or reads files is an error the peers miss, and a test loads such an
archive with torch.jit.load to show the file really appears.
"""

# No `from __future__ import annotations`: torch.jit.script reads the modules' annotations.

import importlib.util
import pickle
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Optional

import pytest

import model_explorer as mx

from .helpers import storage_view

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.reference,
              pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")]


def verdict(ckpt, path) -> str:
    return ckpt.details["files"][str(path)]["pickle"]["verdict"]


def picklescan_dangerous(path) -> int | None:
    """picklescan's count of dangerous globals (its "Dangerous globals" line); None when
    picklescan is not installed."""
    if importlib.util.find_spec("picklescan") is None:
        return None
    from picklescan.scanner import scan_file_path

    return sum(1 for g in scan_file_path(str(path)).globals if g.safety.name == "Dangerous")


def modelscan_issues(path) -> int | None:
    """modelscan's issue count; None when modelscan is not installed."""
    if importlib.util.find_spec("modelscan") is None:
        return None
    from modelscan.modelscan import ModelScan

    return ModelScan().scan(str(path))["summary"]["total_issues"]


def peers_see_nothing(path) -> None:
    """Both peers, where installed, report nothing dangerous; skip when neither is."""
    found = {"picklescan": picklescan_dangerous(path), "modelscan": modelscan_issues(path)}
    if all(v is None for v in found.values()):
        pytest.skip("neither picklescan nor modelscan is installed")
    assert all(v in (0, None) for v in found.values()), found


# -- modules torch.jit.script and torch.jit.trace turn into archives ---------------------------

class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)  # int lists: build_intlist
        self.bn = torch.nn.BatchNorm2d(4)
        self.c2 = torch.nn.Conv2d(4, 8, (3, 1))
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        return self.fc(self.c2(x).mean(dim=[2, 3]))


class Attributes(torch.nn.Module):
    """Every list the pickler specializes, a typed dict and list, optional values."""

    sizes: list[int]
    scales: list[float]
    flags: list[bool]
    table: dict[str, int]
    names: list[str]
    maybe: Optional[torch.Tensor]  # noqa: UP045 (TorchScript reads the annotation)
    maybe_none: Optional[int]  # noqa: UP045

    def __init__(self):
        super().__init__()
        self.sizes, self.scales, self.flags = [1, 2, 3], [0.5, 2.0], [True, False]
        self.table, self.names = {"a": 1, "b": 2}, ["x", "y"]
        self.maybe, self.maybe_none = torch.arange(2.0), None
        self.tensors = [torch.zeros(2), torch.arange(3.0)]
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.scales[0] + self.sizes[1]


class WritesAtLoad(torch.nn.Module):
    """An attack the pickle never shows: __setstate__, which torch.jit.load runs, writes a
    file, and forward reads one."""

    path: str

    def __init__(self, path: str):
        super().__init__()
        self.w = torch.ones(2)
        self.path = path

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, str, bool]:
        return (self.w, self.path, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]) -> None:
        self.w, self.path, self.training = state[0], state[1], state[2]
        torch.save(self.w, self.path)

    def forward(self, x):
        return x + torch.from_file(self.path, False, 2, dtype=torch.uint8).float()


def _save(module, path: Path, example=None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.trace(module, example) if example is not None \
            else torch.jit.script(module)
        torch.jit.save(scripted, path)
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, tuple[Path, torch.nn.Module]]:
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("torchscript")
    lin, net = torch.nn.Linear(4, 3), ConvNet().eval()
    out = {
        "linear_script": (_save(lin, d / "linear_script.pt"), lin),
        "linear_trace": (_save(lin, d / "linear_trace.pt", torch.randn(1, 4)), lin),
        "convnet_script": (_save(net, d / "convnet_script.pt"), net),
        "convnet_trace": (_save(net, d / "convnet_trace.pt", torch.randn(1, 3, 8, 8)), net),
        "attributes": (_save(Attributes(), d / "attributes.pt"), None),
    }
    try:
        with warnings.catch_warnings():  # deprecated in favour of torchao, still in torch
            warnings.simplefilter("ignore")
            q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(4, 4)),
                                                       {torch.nn.Linear}, dtype=torch.qint8)
        out["quantized_dynamic"] = (_save(q, d / "quantized_dynamic.pt"), None)
    except (RuntimeError, AttributeError):  # a build without a quantized engine
        pass
    return out


NAMES = ["linear_script", "linear_trace", "convnet_script", "convnet_trace", "attributes",
         "quantized_dynamic"]


@pytest.mark.parametrize("name", NAMES)
def test_ordinary_archives_are_not_dangerous(archives, name):
    """One warning, torchscript_archive, naming the TorchScript classes; no finding for
    torch.jit._pickle's helpers, which build_intlist and restore_type_tag calls used to be."""
    if name not in archives:
        pytest.skip("no quantized engine in this torch build")
    path, module = archives[name]
    ckpt = mx.open(path)
    assert not ckpt.errors, [str(f) for f in ckpt.errors]
    assert [f.code for f in ckpt.warnings] == ["torchscript_archive"]
    assert verdict(ckpt, path) == "suspicious"
    archive = ckpt.warnings[0]
    assert archive.extra["classes"] and all(c.startswith("__torch__.") for c in archive.extra["classes"])
    assert "none reaches files, processes or the network" in archive.message
    if module is not None:  # the weights equal the module's own, name by name
        state = module.state_dict()
        assert set(state) <= set(ckpt.tensors)
        for key, value in state.items():
            got = storage_view(ckpt, ckpt.tensors[key])
            assert got.tobytes() == value.detach().contiguous().numpy().tobytes(), key


def test_helpers_reduce_to_what_torch_jit_load_builds(archives):
    """build_intlist, build_doublelist, build_boollist, build_tensorlist and restore_type_tag
    reduce to the list or value they wrap: the structure read equals the loaded module's."""
    path, _ = archives["attributes"]
    ckpt = mx.open(path)
    details = ckpt.details["files"][str(path)]["pickle"]
    structure = details["structure"]
    loaded = torch.jit.load(path)
    for attr in ("sizes", "scales", "flags", "table", "names", "maybe_none"):
        assert structure[attr] == getattr(loaded, attr), attr
    helpers = {i["name"]: i for i in details["imports"] if i["module"] == "torch.jit._pickle"}
    assert set(helpers) == {"build_intlist", "build_doublelist", "build_boollist",
                            "build_tensorlist", "restore_type_tag"}
    assert all(i["severity"] == "ok" and i["called"] for i in helpers.values())
    for i, t in enumerate(loaded.tensors):  # build_tensorlist: the list's tensors are named
        assert storage_view(ckpt, ckpt.tensors[f"tensors.{i}"]).tobytes() == t.numpy().tobytes()
    assert storage_view(ckpt, ckpt.tensors["maybe"]).tobytes() == loaded.maybe.numpy().tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_peers_see_nothing_either(archives, name):
    if name not in archives:
        pytest.skip("no quantized engine in this torch build")
    path, _ = archives[name]
    peers_see_nothing(path)


def silero_jit() -> Path:
    """silero-vad's TorchScript model, from the installed package's files (never imported)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("silero-vad is not installed (make dev installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.jit"
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


def test_silero_vad_archive():
    """A TorchScript archive a package ships: 41 TorchScript classes, build_intlist calls, 32
    tensors; one warning, as picklescan and modelscan report nothing dangerous."""
    path = silero_jit()
    ckpt = mx.open(path)
    assert not ckpt.errors, [str(f) for f in ckpt.errors]
    assert [f.code for f in ckpt.warnings] == ["torchscript_archive"]
    assert verdict(ckpt, path) == "suspicious"
    with zipfile.ZipFile(path) as z:
        storages = [n for n in z.namelist() if "/data/" in n]
    assert len(ckpt.tensors) == len(storages)
    loaded = torch.jit.load(path)
    state = loaded.state_dict()
    assert set(state) <= set(ckpt.tensors)
    for key, value in state.items():
        assert storage_view(ckpt, ckpt.tensors[key]).tobytes() == value.contiguous().numpy().tobytes()
    if picklescan_dangerous(path) is not None or modelscan_issues(path) is not None:
        peers_see_nothing(path)


# -- code that reaches beyond TorchScript ---------------------------------------------------

def test_code_that_writes_files_is_dangerous_and_the_peers_miss_it(tmp_path):
    marker = tmp_path / "written_by_torch_jit_load"
    path = _save(WritesAtLoad(str(marker)), tmp_path / "writes.pt")
    assert not marker.exists()  # scripting and saving do not run __setstate__
    ckpt = mx.open(path)
    assert not marker.exists()
    calls = {f.extra["callable"]: f for f in ckpt.errors if f.code == "torchscript_call"}
    assert set(calls) == {"aten::save", "aten::from_file"}
    save = calls["aten::save"]
    assert "__setstate__" in save.message and "loading the file runs it" in save.message
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(save.extra["member"])
        code = z.read(info)
    assert "/code/__torch__/" in info.filename and info.compress_type == zipfile.ZIP_DEFLATED
    # the member's data, right after its local header (the finding spans its deflated bytes)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    assert save.offset == info.header_offset + 30 + name_len + extra_len
    assert save.length == info.compress_size
    assert code[save.extra["position"]:].startswith(b"torch.save(")
    assert verdict(ckpt, path) == "dangerous"
    assert picklescan_dangerous(path) in (0, None) and modelscan_issues(path) in (0, None)
    torch.jit.load(path)  # the proof: loading writes the file __setstate__ names
    assert marker.exists()


def rewrite_code(src: Path, out: Path, edit, method=zipfile.ZIP_DEFLATED) -> None:
    """Copy an archive, passing each TorchScript source file through `edit(text)`."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out, "w") as b:
        for info in a.infolist():
            data = a.read(info)
            if "/code/" in info.filename and info.filename.endswith(".py"):
                b.writestr(info.filename, edit(data.decode()).encode(), compress_type=method)
            else:
                b.writestr(info, data)


def _insert(line: str):
    """An edit putting `line` first in forward's body."""
    def edit(text: str) -> str:
        head, sep, rest = text.partition("-> Tensor:\n")
        return head + sep + f"    {line}\n" + rest
    return edit


@pytest.mark.parametrize("line, operator", [
    ('torch.ops.load_library("/tmp/evil.so")', "torch.ops.load_library"),
    ('_ = torch.classes.load_library("/tmp/evil.so")', "torch.classes.load_library"),
    ('torch . ops . load_library("/tmp/evil.so")', "torch.ops.load_library"),
    ("_ = ops.c10d.barrier(x)", "c10d::barrier"),
    ('_ = ops.aten.save(x, "/tmp/x")', "aten::save"),
    ('_ = ops.debugprims.load_tensor("w", [2], [1], dtype=6, device="cpu")',
     "debugprims::load_tensor"),
    ("_ = torch.distributed.rpc.rpc_sync(x)", "torch.distributed.rpc.rpc_sync"),
])
def test_calls_beyond_torchscript_are_named_at_their_bytes(archives, tmp_path, line, operator):
    """Stored source (no deflate): the finding's offset is the name's own first byte."""
    src, _ = archives["linear_script"]
    path = tmp_path / "edited.pt"
    rewrite_code(src, path, _insert(line), zipfile.ZIP_STORED)
    ckpt = mx.open(path)
    found = [f for f in ckpt.errors if f.code == "torchscript_call"]
    assert [f.extra["callable"] for f in found] == [operator]
    raw = path.read_bytes()
    name = line.split("(")[0].split("= ")[-1]
    assert raw[found[0].offset:found[0].offset + found[0].length] == name.encode()
    assert "in forward" in found[0].message
    assert verdict(ckpt, path) == "dangerous"


def test_native_extension_ops_are_a_warning(tmp_path):
    """An operator torch does not ship runs only if the process loaded its library; the
    archive cannot bring it. A warning, not a danger (torchvision's nms is one such)."""
    lib = torch.library.Library("mx_ts_test", "DEF")  # noqa: TOR901 (a test-only namespace)
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")

    class UsesExtension(torch.nn.Module):
        def forward(self, x):
            return torch.ops.mx_ts_test.twice(x)

    path = _save(UsesExtension(), tmp_path / "ext.pt")
    ckpt = mx.open(path)
    assert not ckpt.errors
    native = [f for f in ckpt.warnings if f.code == "torchscript_native_op"]
    assert [f.extra["callable"] for f in native] == ["mx_ts_test::twice"]
    assert verdict(ckpt, path) == "suspicious"


def test_strings_and_comments_are_not_calls(archives, tmp_path):
    src, _ = archives["linear_script"]
    path = tmp_path / "quoted.pt"
    rewrite_code(src, path, _insert('_ = "torch.save(x, \'/tmp/x\')"  # ops.c10d.barrier(x)'))
    ckpt = mx.open(path)
    assert not ckpt.errors and [f.code for f in ckpt.warnings] == ["torchscript_archive"]


@pytest.mark.parametrize("text", [
    "def f(:\n  ((((\n", "class A:\n  def f(self):\n\treturn 1\n   x\n", "\x00\xff" * 50,
    "(" * 5000, "x = '''unterminated\n", "a." * 20000 + "b",
])
def test_source_that_is_not_python_never_raises(archives, tmp_path, text):
    src, _ = archives["linear_script"]
    path = tmp_path / "junk.pt"
    rewrite_code(src, path, lambda _: text)
    ckpt = mx.open(path)
    assert not ckpt.errors
    assert {f.code for f in ckpt.warnings} <= {"torchscript_archive", "torchscript_code_unread"}


# -- the helpers cannot hide a call ------------------------------------------------------------

def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


@pytest.mark.parametrize("wrapped", [
    # restore_type_tag(f, 'x') is f: calling the result calls f
    _global("torch.jit._pickle", "restore_type_tag") + _global("mypkg.tools", "run")
    + b"X\x01\x00\x00\x00x\x86R",
    # two arguments: not reduced, so the call of its result counts every import in it
    _global("torch.jit._pickle", "build_intlist") + _global("mypkg.tools", "run") + b"K\x01\x86R",
])
def test_a_helper_returning_a_callable_is_still_a_call(tmp_path, wrapped):
    p = tmp_path / "hidden.pkl"
    p.write_bytes(b"\x80\x02" + wrapped + b"X\x03\x00\x00\x00cmd\x85R.")
    ckpt = mx.open(p)
    assert verdict(ckpt, p) == "dangerous"
    assert any(f.code == "unlisted_call" and "mypkg.tools.run" in f.message for f in ckpt.errors)


def test_plain_pickle_of_jit_helpers_reads_as_data(tmp_path):
    """A Python pickle calling the helpers directly is plain data too."""
    from torch.jit import _pickle as jp

    class Wrap:
        def __init__(self, f, *a):
            self.f, self.a = f, a

        def __reduce__(self):
            return self.f, self.a

    p = tmp_path / "helpers.pkl"
    p.write_bytes(pickle.dumps({"ints": Wrap(jp.build_intlist, [1, 2]),
                                "tagged": Wrap(jp.restore_type_tag, {"k": 1.5}, "Dict[str, float]"),
                                "id": Wrap(jp.build_tensor_from_id, 7)}, protocol=4))
    ckpt = mx.open(p)
    assert not ckpt.errors and not ckpt.warnings
    assert verdict(ckpt, p) == "safe"
    structure = ckpt.details["files"][str(p)]["pickle"]["structure"]
    assert structure == pickle.loads(p.read_bytes())  # torch.jit._pickle's own results


def test_torchscript_archive_over_http(served):
    """The same findings as the local file, the source files fetched in one request."""
    import shutil

    root, base, server = served
    shutil.copy(silero_jit(), root / "vad.pt")
    local = mx.open(root / "vad.pt")
    server.requests.clear()
    remote = mx.open(f"{base}/vad.pt")
    assert [(f.code, f.offset) for f in remote.findings] == [(f.code, f.offset) for f in local.findings]
    assert remote.warnings[0].extra == local.warnings[0].extra
    assert len(server.requests) < 30, len(server.requests)  # 20 here; 64 file by file


@pytest.mark.parametrize("ext", ["jpt", "ts", "ptl", "torchscript", "jit"])
def test_torchscript_extensions_are_no_mismatch(archives, tmp_path, ext):
    """TorchScript's own names for its archives (Triton's model.pt, DJL's .jpt, PyTorch Mobile's
    .ptl, .ts and .torchscript) are a zip of torch's: no extension_mismatch."""
    path = tmp_path / f"model.{ext}"
    path.write_bytes(archives["linear_script"][0].read_bytes())
    assert "extension_mismatch" not in {f.code for f in mx.open(path).findings}
