"""The "needs_classes" verdict: a whole model saved with torch.save(model) needs the author's
classes (weights_only=True refuses it) but calls nothing of the file's choosing; it is told apart
from a payload, which stays "dangerous" (the gadgets of gadgets.py), and from plain data."""

from __future__ import annotations

import collections
import datetime
import pickle
import warnings
import zipfile

import pytest

import model_explorer as mx
from model_explorer.cli import main

from .gadgets import g4, p4, s


def verdict(ckpt, path) -> str:
    return ckpt.details["files"][str(path)]["pickle"]["verdict"]


@pytest.mark.parametrize("name, args", [
    ("sorted", b"](K\x03K\x01e\x85"), ("reversed", b"]K\x01a\x85"), ("enumerate", b"]K\x01a\x85"),
    ("zip", b"]K\x01a]K\x02a\x86"), ("hash", b"K\x07\x85"), ("min", b"K\x01K\x02\x86"),
    ("round", b"G?\xf8\x00\x00\x00\x00\x00\x00\x85"), ("divmod", b"K\x07K\x02\x86"),
    ("pow", b"K\x02K\x03\x86"),
])
def test_more_pure_builtins_called_are_safe(tmp_path, name, args):
    p = tmp_path / "b.pkl"
    p.write_bytes(b"\x80\x02cbuiltins\n" + name.encode() + b"\n" + args + b"R.")
    ckpt = mx.open(p)
    assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.findings]
    assert verdict(ckpt, p) == "safe"


def _whole_model():
    import torch

    class Scaled(torch.Tensor):  # a tensor subclass: torch saves it with _rebuild_from_type_v2
        pass

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.act = torch.nn.GELU()
            self.register_buffer("scale", torch.ones(4).as_subclass(Scaled))

        def forward(self, x):
            return self.act(self.proj(x))

    for cls in (Scaled, Block):  # pickled by module and name, as module-level classes are
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls
    return Block()


def test_torch_save_of_a_model_with_its_optimizer_and_a_tensor_subclass(tmp_path):
    import torch

    model = _whole_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()  # the optimizer's state: a collections.defaultdict, made by its own constructor
    p = tmp_path / "ckpt.pt"
    torch.save({"model": model, "optimizer": opt, "when": datetime.date(2024, 1, 2)}, p)
    ckpt = mx.open(p)
    assert not ckpt.errors, [str(f) for f in ckpt.errors]
    assert verdict(ckpt, p) == "needs_classes"
    f = next(f for f in ckpt.findings if f.code == "needs_author_classes")
    assert [x.code for x in ckpt.warnings] == ["needs_author_classes"]
    ours = f"{__name__}.Block", f"{__name__}.Scaled"
    for name in (*ours, "torch.nn.modules.linear.Linear", "torch.optim.sgd.SGD",
                 "collections.defaultdict", "datetime.date"):
        assert name in f.extra["classes"], name
    for text in (*ours, "weights_only=True", "weights_only=False", "import-time code", "byte",
                 "a whole model"):
        assert text in f.message, text
    assert not f.extra["weights_plain"]
    assert "state_dict" in f.fix and "mx.repair" in f.fix
    with zipfile.ZipFile(p) as z:  # the finding points at the GLOBAL of the first class
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
        assert info.compress_type == zipfile.ZIP_STORED
    assert p.read_bytes()[f.offset:f.offset + 1] == b"c"
    assert main(["doctor", str(p)]) == 0 and main(["doctor", "--strict", str(p)]) == 1


class HParams:  # a configuration object beside plain weights, as omegaconf's are in Lightning
    def __init__(self):
        self.lr = 0.01


def _lightning(hparams):
    import torch

    state = collections.OrderedDict([("model.fc.weight", torch.randn(3, 2)),
                                     ("model.bn.num_batches_tracked", torch.tensor(7))])
    return {"epoch": 2, "global_step": 40, "pytorch-lightning_version": "2.4.0", "state_dict": state,
            "optimizer_states": [], "hparams_name": "kwargs", "hyper_parameters": {"cfg": hparams}}


def _lightning_hparams():
    HParams.__qualname__ = HParams.__name__
    try:
        from omegaconf import OmegaConf  # what Lightning saves its hyperparameters as
    except ImportError:
        return HParams()
    return OmegaConf.create({"lr": 0.001, "model": {"hidden": 4, "layers": [1, 2]}})


def test_a_lightning_checkpoint_needs_the_classes_for_its_hyperparameters_only(tmp_path):
    """Tensors in a plain state_dict, only the hyperparameters in objects (omegaconf's, with
    typing.Any as their type annotations): no "whole model", no warning of its own for typing.Any,
    and the message says the state dict alone loads with weights_only=True, which torch confirms."""
    import torch

    p = tmp_path / "epoch=2.ckpt"
    ckpt_value = _lightning(_lightning_hparams())
    torch.save(ckpt_value, p)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(p, weights_only=True)
    ckpt = mx.open(p)
    assert not ckpt.errors and [f.code for f in ckpt.warnings] == ["needs_author_classes"], \
        [str(f) for f in ckpt.findings]
    assert verdict(ckpt, p) == "needs_classes"
    f = ckpt.warnings[0]
    assert "whole model" not in f.message
    assert f.extra["weights_plain"] and f.extra["object_keys"] == ["hyper_parameters"]
    for text in ("key 'state_dict'", "key 'hyper_parameters'", "weights_only=True",
                 "torch.save(checkpoint['state_dict'], path)", "mx.repair"):
        assert text in f.message, text
    if "omegaconf.dictconfig.DictConfig" in f.extra["classes"]:
        assert "typing.Any" in f.extra["classes"] and "references to typing.Any" in f.message
    alone = tmp_path / "state.pt"  # what the message says: the state dict alone loads
    torch.save(ckpt_value["state_dict"], alone)
    assert set(torch.load(alone, weights_only=True)) == set(ckpt_value["state_dict"])
    assert verdict(mx.open(alone), alone) == "safe"


def test_a_type_annotation_called_is_still_a_call(tmp_path):
    p = tmp_path / "call.pkl"
    p.write_bytes(b"\x80\x02ctyping\nAny\n)R.")
    assert verdict(mx.open(p), p) == "dangerous"
    p.write_bytes(b"\x80\x02ctyping\nAny\n.")  # only referenced: no call
    ckpt = mx.open(p)
    assert verdict(ckpt, p) == "needs_classes" and not ckpt.errors
    assert "whole model" not in ckpt.warnings[0].message


def test_the_fix_it_names_works(tmp_path, capsys):
    import torch

    model = _whole_model()
    p = tmp_path / "model.pt"
    torch.save(model, p)
    assert verdict(mx.open(p), p) == "needs_classes"
    assert mx.repair(p, tmp_path / "out").ok
    out = mx.open(tmp_path / "out" / "model.safetensors")
    assert set(out.tensors) == set(model.state_dict()) and not out.errors


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_classes_are_not_the_authors_classes(tmp_path):
    """torch.jit.load compiles __torch__ classes from the code the archive holds: that is code
    the file brings, not classes installed by the author, so it stays "suspicious"."""
    import torch

    p = tmp_path / "ts.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), p)
    ckpt = mx.open(p)
    assert not ckpt.errors and verdict(ckpt, p) == "suspicious"
    assert "needs_author_classes" not in {f.code for f in ckpt.findings}


def test_a_class_also_referenced_on_its_own_is_judged_as_referenced(tmp_path):
    """Built once and imported again by a second GLOBAL (not through the memo, as a pickler
    would): the name is not only built, so it is an unknown import, listed as such."""
    p = tmp_path / "mixed.pkl"
    built = b"cmypkg.models\nNet\n)\x81}b"
    p.write_bytes(b"\x80\x02" + built + b"cmypkg.models\nNet\n\x86.")
    ckpt = mx.open(p)
    assert not ckpt.errors and verdict(ckpt, p) == "suspicious"
    assert [f.code for f in ckpt.warnings] == ["unknown_import"]
    assert "mypkg.models.Net" in ckpt.warnings[0].message


def test_a_tolerated_class_made_by_its_constructor_needs_classes(tmp_path):
    p = tmp_path / "dd.pkl"
    p.write_bytes(pickle.dumps({"d": collections.defaultdict(list, a=[1])}, protocol=2))
    ckpt = mx.open(p)
    assert not ckpt.errors and verdict(ckpt, p) == "needs_classes"
    assert ckpt.warnings[0].extra["classes"] == ["collections.defaultdict"]


def test_a_reconstructed_object_without_state_needs_classes(tmp_path):
    """Protocol 0 saves an object with an empty __dict__ as copyreg._reconstructor(cls, object,
    None) and no BUILD."""
    p = tmp_path / "p0.pkl"
    p.write_bytes(b"ccopy_reg\n_reconstructor\n(cmypkg.models\nNet\nc__builtin__\nobject\nNtR.")
    ckpt = mx.open(p)
    assert not ckpt.errors and verdict(ckpt, p) == "needs_classes"
    assert ckpt.warnings[0].extra["classes"] == ["mypkg.models.Net"]


@pytest.mark.parametrize("module, name", [("os", "system"), ("posix", "system"),
                                          ("builtins", "eval"), ("subprocess", "Popen"),
                                          ("functools", "partial"), ("builtins", "map"),
                                          ("builtins", "type")])
def test_newobj_of_a_denied_or_standard_library_name_is_dangerous(tmp_path, module, name):
    p = tmp_path / "n.pkl"
    p.write_bytes(p4(g4(module, name) + b"(" + s("id") + b"t\x81"))
    ckpt = mx.open(p)
    assert verdict(ckpt, p) == "dangerous", [str(f) for f in ckpt.findings]
    assert "needs_author_classes" not in {f.code for f in ckpt.findings}
    assert main(["doctor", str(p)]) == 1
