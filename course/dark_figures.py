"""Figures that follow the reader's dark preference on the course site.

Loaded into each notebook's kernel when the site is built (an IPython startup file, so no cell
or execution count changes): every matplotlib Figure shown gets, beside its PNG, an HTML form
that the page renders instead, `<picture>` with the figure as drawn for a light page and a copy
redrawn for a dark one (transparent background, light axes, ticks, labels and titles; the
plotted colours as they are). The notebook's own PNG output stays, so the saved notebook and
the tests that look for an image see the same figure.
"""

from __future__ import annotations

import base64
import io
import pickle

FOREGROUND = "#d4d4d4"  # the axes' ink on a dark page (JupyterLab Dark's text is about this)


def _png(fig, **kw) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", **kw)
    return buf.getvalue()


def dark_copy(fig):
    """A copy of `fig` restyled for a dark page; the figure itself is left as it was."""
    copy = pickle.loads(pickle.dumps(fig))
    copy.patch.set_alpha(0.0)
    texts = [t for t in (getattr(copy, "_suptitle", None), getattr(copy, "_supxlabel", None),
                         getattr(copy, "_supylabel", None)) if t is not None]
    for ax in copy.axes:
        ax.patch.set_alpha(0.0)
        for spine in ax.spines.values():
            spine.set_edgecolor(FOREGROUND)
        ax.tick_params(colors=FOREGROUND, which="both")
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
                  ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()]
        legend = ax.get_legend()
        if legend is not None:
            legend.get_frame().set_facecolor("#1e1e1e")
            legend.get_frame().set_edgecolor("#555555")
            texts += list(legend.get_texts())
    for text in texts:
        text.set_color(FOREGROUND)
    return copy


def picture_html(fig) -> str | None:
    """The figure as `<picture>`: the dark copy for a dark page, the figure as drawn otherwise."""
    if not fig.axes:
        return None
    try:
        light = _png(fig)
        dark = _png(dark_copy(fig), transparent=True)
    except Exception:  # a figure that cannot be copied shows as its plain PNG
        return None
    b64 = {k: base64.b64encode(v).decode("ascii") for k, v in (("light", light), ("dark", dark))}
    return ('<picture class="me-figure"><source media="(prefers-color-scheme: dark)" '
            f'srcset="data:image/png;base64,{b64["dark"]}">'
            f'<img class="me-figure" alt="figure" src="data:image/png;base64,{b64["light"]}"></picture>')


def register() -> None:
    """Add the `<picture>` form to every Figure IPython displays in this kernel.

    Turning on matplotlib's inline backend (the first pyplot import) drops every formatter
    registered for Figure (`select_figure_formats`), so the form is registered again right after
    that, before each cell, and before the backend draws a cell's figures (post_execute).
    """
    from IPython import get_ipython
    from matplotlib.figure import Figure

    shell = get_ipython()
    if shell is None:
        return

    def ensure(*_args) -> None:
        shell.display_formatter.formatters["text/html"].for_type(Figure, picture_html)

    ensure()
    shell.events.register("pre_run_cell", ensure)
    shell.events.register("post_execute", ensure)
    try:
        import matplotlib_inline.backend_inline as inline
    except ImportError:
        return
    select = inline.select_figure_formats

    def select_then_ensure(*args, **kwargs):
        select(*args, **kwargs)
        ensure()

    inline.select_figure_formats = select_then_ensure
