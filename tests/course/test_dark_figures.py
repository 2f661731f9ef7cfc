"""The course site's figures have a dark form (course/dark_figures.py): a restyled copy with a
transparent background and light axes, the plotted data as drawn, and the figure itself untouched."""

from __future__ import annotations

import base64
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "course"))
from dark_figures import FOREGROUND, picture_html  # noqa: E402


def _images(html: str) -> dict[str, np.ndarray]:
    dark, light = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    return {k: matplotlib.image.imread(io.BytesIO(base64.b64decode(v)), format="png")
            for k, v in (("dark", dark), ("light", light))}


def test_a_figure_gets_a_dark_form_and_stays_as_drawn():
    fig = Figure(figsize=(4, 2))
    ax = fig.add_subplot(1, 2, 1)
    ax.imshow(np.arange(16.0).reshape(4, 4), cmap="gray")
    ax.set_title("heat")
    other = fig.add_subplot(1, 2, 2)
    other.plot([0, 1], [0, 1], label="a")
    other.legend()
    html = picture_html(fig)
    assert html.startswith("<picture") and 'media="(prefers-color-scheme: dark)"' in html
    images = _images(html)
    assert images["light"][0, 0, 3] == 1.0 and images["light"][0, 0, :3].min() == 1.0  # white paper
    assert images["dark"][0, 0, 3] == 0.0  # transparent: the page's own background shows
    # the light ink of the dark form is there; the figure keeps its own colours
    ink = matplotlib.colors.to_rgb(FOREGROUND)
    assert np.any(np.all(np.abs(images["dark"][..., :3] - ink) < 0.02, axis=-1) & (images["dark"][..., 3] > 0.9))
    assert matplotlib.colors.to_hex(ax.title.get_color()) == "#000000" and fig.patch.get_alpha() is None


def test_an_empty_figure_keeps_its_plain_image():
    assert picture_html(Figure()) is None
