"""device="auto" hands a GGUF the numpy decoder refuses to llama.cpp when a binding of it loads,
choosing the engine before the decoder's hyperparameter reader can refuse; without one, the
refusal says what a binding would add. A real binding cannot run a GGUF whose tensors are random
stand-ins for an architecture it knows (mamba here), so a fake `llama_cpp` module (the
llama-cpp-python adapter's binding) stands in; tests/runtime/test_llamacpp.py runs a real one."""

from __future__ import annotations

import ctypes
import importlib.machinery
import sys
import types

import pytest
from conftest import random_state, tiny_config, write_gguf

from model_explorer.runtime import UnsupportedModel, load_model
from model_explorer.runtime import engines as backend_module
from model_explorer.runtime.engines import llamacpp


def _fake_llama_cpp(vocab: int) -> types.ModuleType:
    """llama_cpp as LlamaCppEngine uses it: Llama(model_path=...), eval, n_tokens, n_vocab, ctx,
    close, and llama_get_logits_ith. Its logits are one-hot at (last id + 1) % vocab."""
    mod = types.ModuleType("llama_cpp")
    mod.__spec__ = importlib.machinery.ModuleSpec("llama_cpp", None)
    mod.loaded = []
    buffer = (ctypes.c_float * vocab)()

    class Llama:
        def __init__(self, model_path, n_ctx, **kwargs):
            self.model_path, self.n_ctx, self.n_tokens, self.ctx = model_path, n_ctx, 0, object()
            mod.loaded.append(self)

        def n_vocab(self):
            return vocab

        def eval(self, ids):
            self.n_tokens += len(ids)
            ctypes.memset(buffer, 0, ctypes.sizeof(buffer))
            buffer[(ids[-1] + 1) % vocab] = 1.0

        def close(self):
            pass

    mod.Llama = Llama
    mod.llama_get_logits_ith = lambda ctx, i: ctypes.cast(buffer, ctypes.POINTER(ctypes.c_float))
    return mod


@pytest.fixture
def mamba_gguf(tmp_path):
    """A GGUF whose architecture llama.cpp knows and the numpy decoder does not."""
    cfg = tiny_config()
    return write_gguf(cfg, random_state(cfg), str(tmp_path / "m.gguf"), architecture="mamba"), cfg


def test_auto_hands_an_architecture_the_decoder_refuses_to_llamacpp(mamba_gguf, monkeypatch):
    path, cfg = mamba_gguf
    fake = _fake_llama_cpp(cfg["vocab_size"])
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    # even with a GPU for torch: the numpy/torch decoder would refuse this architecture
    monkeypatch.setattr(backend_module, "available_devices", lambda: ["cpu", "cuda"])
    model = load_model(path)  # device="auto"
    assert isinstance(model.backend, llamacpp.LlamaCppEngine)
    assert [m.model_path for m in fake.loaded] == [path]
    assert model.config.architecture == "mamba" and model.config.vocab_size == cfg["vocab_size"]
    assert model.tokenizer is not None  # ours, from the GGUF's vocabulary
    logits = model.forward([5, 9, 11])
    assert logits.shape == (3, cfg["vocab_size"])
    assert list(logits.argmax(1)) == [6, 10, 12]
    assert "llama.cpp" in repr(model)


def test_auto_keeps_the_numpy_decoder_for_an_architecture_it_runs_when_a_gpu_is_there(tmp_path, monkeypatch):
    cfg = tiny_config()
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "l.gguf"))
    monkeypatch.setitem(sys.modules, "llama_cpp", _fake_llama_cpp(cfg["vocab_size"]))
    monkeypatch.setattr(backend_module, "available_devices", lambda: ["cpu", "cuda"])
    from model_explorer.runtime.api import _wants_llamacpp

    assert not _wants_llamacpp(path, "auto", None, False)  # torch on the GPU runs llama
    assert not _wants_llamacpp(path, "cpu", None, False)  # asked for numpy
    monkeypatch.setattr(backend_module, "available_devices", lambda: ["cpu"])
    assert _wants_llamacpp(path, "auto", None, False)  # CPU only: llama.cpp is the faster engine


def test_without_llamacpp_the_refusal_says_what_it_would_add(mamba_gguf, monkeypatch):
    path, _ = mamba_gguf
    monkeypatch.setattr(llamacpp, "installed", lambda: False)
    with pytest.raises(UnsupportedModel, match=r"'mamba' is not supported.*llama\.cpp runs 'mamba'.*"
                                               r"pip install 'checkpoint-model-explorer\[llamacpp\]'"):
        load_model(path)


def test_an_architecture_llamacpp_does_not_know_gets_no_offer(tmp_path, monkeypatch):
    cfg = tiny_config()
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "x.gguf"), architecture="no-such-arch")
    monkeypatch.setattr(llamacpp, "installed", lambda: False)
    with pytest.raises(UnsupportedModel) as e:
        load_model(path)
    assert "'no-such-arch' is not supported" in str(e.value) and "llama.cpp runs" not in str(e.value)


def test_an_installed_binding_whose_library_does_not_load_is_not_used_and_says_why(monkeypatch):
    """llama-cpp-py-sync's wheels are tagged manylinux2014 but need glibc 2.38: on Debian 12 the
    package imports and its library does not load. The engine then counts as not installed, and
    the refusal says which binding failed and why."""
    from model_explorer.runtime.engines import llamacpp_binding

    bad = types.ModuleType("bad_adapter")
    bad.MODULE, bad.PACKAGE = "colorsys", "some-binding"  # importable, rarely imported

    def check():
        raise RuntimeError("cannot load library 'libllama.so': /lib/x86_64-linux-gnu/libc.so.6: "
                           "version `GLIBC_2.99' not found (required by libllama.so)")

    bad.check = check
    monkeypatch.setattr(llamacpp_binding, "ADAPTERS", ("bad",))
    monkeypatch.setattr(llamacpp_binding, "adapter", lambda name: bad)
    monkeypatch.setattr(llamacpp_binding, "_failed", {})
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    assert not llamacpp.installed()
    assert llamacpp_binding.problems() == [
        f"some-binding is installed but does not load here: its shared library needs GLIBC_2.99; "
        f"this system has {' '.join(__import__('platform').libc_ver())}"]
    assert "needs GLIBC_2.99" in llamacpp.missing()
