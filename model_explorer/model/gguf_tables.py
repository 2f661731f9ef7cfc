"""gguf-py's tables of architectures and tensor names (its `constants` module), read without
importing the rest of the package.

`import gguf` also imports its reader, writer, metadata helpers and PyYAML: about 60 ms of an
open that needs two dictionaries. Its constants module imports only `enum` and `typing`, so it
is loaded on its own, from the installed package's file, under a private name (or taken from
`sys.modules` when gguf-py is already imported). None when gguf-py is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import lru_cache
from types import ModuleType


@lru_cache(maxsize=1)
def constants() -> ModuleType | None:
    loaded = sys.modules.get("gguf.constants")
    if loaded is not None:
        return loaded
    try:
        spec = importlib.util.find_spec("gguf")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((os.path.join(f, "constants.py") for f in folders
                 if os.path.isfile(os.path.join(f, "constants.py"))), None)
    if path is None:
        return None
    own = importlib.util.spec_from_file_location("model_explorer._gguf_constants", path)
    if own is None or own.loader is None:
        return None
    module = importlib.util.module_from_spec(own)
    try:
        own.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - a gguf-py whose constants need more: import it whole
        try:
            import gguf
        except ImportError:
            return None
        return gguf
    return module
