"""What differs between the front ends anywidget runs in (JupyterLab, Notebook 7, VS Code, Colab,
marimo), kept in one place.

marimo turns a widget's `_esm` into a URL it serves, and mints that URL only while a cell runs;
a widget the Explorer creates when the browser asks (the Run tab's RunDemo, the Explorer of a
fixed copy) is made outside any cell, so marimo would fail on it. A `data:text/javascript` URL
is used as is: such widgets get their bundle that way under marimo.
"""

from __future__ import annotations

import base64
import sys
from functools import cache
from pathlib import Path
from typing import Any


def in_marimo() -> bool:
    """True in a marimo kernel (marimo edit / marimo run), False in Jupyter or plain Python."""
    mo = sys.modules.get("marimo")
    if mo is None:
        return False
    try:
        return bool(mo.running_in_notebook())
    except Exception:  # noqa: BLE001 - an old or odd marimo: behave as in Jupyter
        return False


@cache
def _with_data_url(cls: type, code: str) -> type:
    url = "data:text/javascript;base64," + base64.b64encode(code.encode("utf-8")).decode("ascii")
    return type(cls.__name__, (cls,), {"_esm": url, "__module__": cls.__module__, "__doc__": cls.__doc__})


def child_widget(cls: type, *args: Any, **kwargs: Any):
    """`cls(*args, **kwargs)`, made so that the front end can draw it although no cell is
    running (see the module's note); in Jupyter, exactly `cls(*args, **kwargs)`."""
    esm = getattr(cls, "_esm", None)
    if in_marimo() and esm is not None:
        # anywidget keeps a class's bundle as FileContents (str() is the code) or a Path.
        code = esm.read_text(encoding="utf-8") if isinstance(esm, Path) else str(esm)
        if code and not code.startswith(("data:", "http://", "https://")):
            cls = _with_data_url(cls, code)
    return cls(*args, **kwargs)
