"""What a page shows of an executed notebook: no blank strips.

A progress bar (tqdm's ipywidgets HBox: a FloatProgress between two HTML labels) is saved as a
widget whose work is over; on a page it is an empty strip. Such outputs, and streams that are
blank once their carriage-return rewrites are applied, are dropped before rendering.
"""

from __future__ import annotations

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROGRESS = {"FloatProgressModel", "IntProgressModel"}


def _state(nb) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def is_progress(state: dict, model_id: str) -> bool:
    model = state.get(model_id)
    if model is None:
        return False
    if model.get("model_name") in PROGRESS:
        return True
    children = [str(c).removeprefix("IPY_MODEL_") for c in model.get("state", {}).get("children", [])]
    return model.get("model_name") == "HBoxModel" and any(
        state.get(c, {}).get("model_name") in PROGRESS for c in children)


def _blank_stream(out) -> bool:
    if out.get("output_type") != "stream":
        return False
    lines = [line.rsplit("\r", 1)[-1] for line in out.get("text", "").split("\n")]
    return not "".join(lines).strip()


def tidy(nb):
    """The notebook without progress bars and blank streams (changed in place, returned)."""
    state = _state(nb)
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if (view and is_progress(state, view.get("model_id", ""))) or _blank_stream(out):
                continue
            kept.append(out)
        cell.outputs = kept
    return nb
