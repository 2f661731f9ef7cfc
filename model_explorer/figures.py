"""The one way the library draws a figure: a matplotlib Figure outside pyplot that shows itself.

A Figure built without pyplot is not in pyplot's list, so a script saves it and nothing draws it
twice; but IPython only draws a bare Figure as an image once matplotlib's inline backend has
registered its display (after a first `plt.figure()`), and otherwise prints `<Figure size ...>`.
`new_figure` returns a Figure that carries its own PNG (`_repr_png_`), so a notebook, a saved
notebook and the course site all show the image, whatever pyplot did before.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure


class ShownFigure(Figure):
    """A Figure that a notebook displays as a PNG image."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


def new_figure(figsize: tuple[float, float]) -> ShownFigure:
    return ShownFigure(figsize=figsize)
