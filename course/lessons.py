"""The course notebooks: which they are, how they run headless, and how they are stored.

Shared by `course/build_site.py` (`make course`) and `tests/notebooks/`. Notebooks execute in
a fresh `python3` kernel of the environment running this code (jupyter_client swaps the
kernelspec's "python" for `sys.executable`), with their own folder as working directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
COURSE = {
    "00_tour": "The bundled SmolLM2 GGUF through every view, from the first byte to running the model.",
    "01_safetensors": "The 8-byte length prefix, the JSON header, offsets relative to the data section, "
                      "padding, and why mmap makes loading cheap.",
    "02_gguf": "Magic, version and counts; typed key/values, the embedded tokenizer, tensor infos, "
               "alignment, and one quantization block decoded by hand.",
    "03_pickle_danger": "How a pickle runs code, read safely opcode by opcode; the import list and the "
                        "verdict; a PyTorch checkpoint converted to safetensors without running it.",
    "04_sharding": "Index files and the shard map; debugging a \"missing key\" error on a broken index.",
    "05_quantization_lab": "Q8_0, Q4_0/Q4_1, K-quants and MLX affine blocks taken apart; error "
                           "histograms against F32; the effect on generated text.",
    "06_broken_checkpoint_clinic": "A gallery of broken files, each diagnosed by the Explorer with the "
                                   "finding explained.",
    "07_hub_quantization": "A GPTQ layer (act-order groups, zero points minus one) and an FP8 "
                           "128x128 block-scaled layer built byte by byte and decoded by hand.",
    "08_debugging_a_conversion": "A conversion that passes every byte check but writes worse text: the "
                                 "sample traced, a planted q/k row-order fault found by compare_runs at "
                                 "its layer, module and bytes, fixed and checked again; then llama.cpp itself as the engine, "
                                 "and a RoPE base written wrong in the metadata found on llama.cpp's own tensors.",
    "09_model_families": "Llama and Gemma 2 side by side: the dials in config.json, the norms in the "
                         "tensors, and compare_runs showing where each softcap and the sliding window act.",
    "10_real_sizes": "A big conversion debugged in bounded memory: the run's memory plan, a planted fault "
                     "found by compare_runs streaming layer by layer, a refusal with the figures, and the "
                     "massive activations a trained model has and random weights do not.",
    "11_safe_to_chat": "Safe to load, safe to chat with: a chat template that adds an instruction only "
                       "for some conversations, bidi text in a model card, a generation config that never "
                       "lets the model stop, and auto_map code, each read at its bytes beside lesson 03.",
    "12_one_model_every_format": "One tiny Llama as safetensors, ONNX (torch.onnx), OpenVINO and GGUF: the "
                                 "family's block graph beside the exporters' operator graphs, one weight found "
                                 "in all four files, and mx.diff pairing them across formats.",
    "13_an_export_that_loses_accuracy": "A tiny BERT exported to ONNX and run on onnxruntime against transformers: "
                                        "a clean export agrees, a wrong LayerNorm epsilon is a jump named at its node "
                                        "and bytes, dynamic quantization is a drift with its SQNR per layer.",
}
CELL_TIMEOUT = 170  # seconds; the whole notebook must stay under 3 minutes on 2 cores


def notebook_paths() -> list[Path]:
    return [NOTEBOOK_DIR / f"{name}.ipynb" for name in COURSE]


def is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def stored_problems(nb) -> list[str]:
    """What makes a committed notebook not clean: outputs, execution counts, widget state."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i} has {len(cell.outputs)} stored output(s)")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i} has execution_count {cell.execution_count}")
    if "widgets" in nb.metadata:
        problems.append("the notebook metadata holds saved widget state")
    return problems


@dataclass
class Executed:
    notebook: nbformat.NotebookNode
    seconds: float
    extra_outputs: list[list]  # outputs of the extra cells, in order


def execute(path: Path, store_widget_state: bool = False, timeout: int = CELL_TIMEOUT,
            extra_cells: tuple[str, ...] = ()) -> Executed:
    """Run a notebook top to bottom in a fresh kernel; raises nbclient's CellExecutionError.

    `extra_cells` run after the notebook's own cells (the site builder uses one to record what
    the widgets would answer without a kernel) and are removed again before returning.
    """
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    own = len(nb.cells)
    nb.cells.extend(nbformat.v4.new_code_cell(src) for src in extra_cells)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            store_widget_state=store_widget_state,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - t0
    extra = [c.get("outputs", []) for c in nb.cells[own:]]
    del nb.cells[own:]
    return Executed(nb, seconds, extra)


def text_output(cell) -> str:
    """All stdout text and text/plain results of one executed cell."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)
