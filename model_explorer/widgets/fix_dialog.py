"""The Fix… dialog: the repair plan of a checkpoint, the fixes to apply (checkboxes), where the
copy goes (next to the source, under a new name), a progress bar, and the report; then the
fixed copy opened in a second Explorer or compared with `mx.diff`.

Plain ipywidgets: every string from the file is shown as text (Output/print, Checkbox
descriptions), never as HTML.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..formats.gguf_split import _SPLIT as SPLIT_NAME  # one pattern for split names
from ..opener import diff
from ..repairs import RepairError, repair, repair_plan

EXPLORE: Callable[[Any], Any] | None = None
"""What "Open in Explorer" shows the fixed copy in: `widgets/__init__.py` sets it to `explore`.
This module may not import the Explorer, whose Fix… button imports this module."""


def fixed_name(source: str) -> str:
    """A new name next to the source that does not exist yet: m.fixed.safetensors, model.fixed/,
    and for a split GGUF (NAME-00001-of-00003.gguf, any of its splits) the folder NAME.fixed/:
    the repairs write a split model into a folder, keeping its files' names."""
    source = os.path.abspath(os.fspath(source)).rstrip(os.sep)
    if source.endswith(".index.json"):
        source = os.path.dirname(source)
    split = SPLIT_NAME.match(os.path.basename(source))
    if split and int(split["count"]) > 1:
        stem, ext = os.path.join(os.path.dirname(source), split["stem"]), ""
    else:
        stem, ext = (source, "") if os.path.isdir(source) else os.path.splitext(source)
    if ext in (".bin", ".pt", ".pth", ".pkl", ".ckpt"):
        ext = ".safetensors"
    for k in range(1, 1000):
        cand = f"{stem}.fixed{'' if k == 1 else f'-{k}'}{ext}"
        if not os.path.exists(cand):
            return cand
    raise RepairError(f"No free name next to {source!r}.")


class FixDialog(w.VBox):
    """`FixDialog(source, **choices)`: review the plan, pick fixes, write a verified copy.

    `only` (fix names or finding codes) ticks just those fixes; the others stay listed, unticked
    (the Explorer's Fix… button on one finding passes that finding's fixes).
    """

    def __init__(self, source: Any, dest: str | None = None, only: list[str] | None = None,
                 **choices) -> None:
        self.source = os.fspath(getattr(source, "source", source))
        self.choices = choices
        self.plan = repair_plan(source, **choices)
        self.report = None
        wanted = None if only is None else set(only)
        self.boxes = [w.Checkbox(value=wanted is None or f.matches(wanted), description=str(f),
                                 indent=False, layout=w.Layout(width="100%")) for f in self.plan.fixes]
        self.dest = w.Text(value=dest or fixed_name(self.source), description="copy to",
                           layout=w.Layout(width="100%"))
        self.write = w.Button(description="Write fixed copy", button_style="primary",
                              disabled=not self.plan.fixes)
        self.bar = w.IntProgress(min=0, max=100, value=0, layout=w.Layout(width="100%"))
        self.out = w.Output()
        self.open_fixed = w.Button(description="Open in Explorer", disabled=True)
        self.compare = w.Button(description="Compare (mx.diff)", disabled=True)
        self.write.on_click(lambda _: self.run())
        self.open_fixed.on_click(lambda _: self._show("explore"))
        self.compare.on_click(lambda _: self._show("diff"))
        plan_text = w.Output()
        with plan_text:
            print(self.plan if self.plan.fixes or self.plan.unfixable else "Nothing to fix.")
        super().__init__([plan_text, *self.boxes, self.dest, w.HBox([self.write, self.open_fixed, self.compare]),
                          self.bar, self.out])

    def close(self) -> None:
        """Close the dialog and the widgets it is made of."""
        for child in (*self.boxes, self.dest, self.write, self.bar, self.out, self.open_fixed,
                      self.compare, *self.children):
            child.close()
        super().close()

    def selected(self) -> list[str]:
        return [f.name for f, box in zip(self.plan.fixes, self.boxes) if box.value]

    def run(self):
        """Write the copy with the ticked fixes; the report is shown and kept in `.report`."""
        self.write.disabled = True
        self.out.clear_output()

        def progress(done: int, total: int, what: str) -> None:
            self.bar.value = int(100 * done / total) if total else 100

        with self.out:
            try:
                self.report = repair(self.source, self.dest.value, fixes=self.selected(),
                                     progress=progress, **self.choices)
            except (RepairError, OSError) as e:
                print(f"Not written: {e}")
                self.write.disabled = False
                return None
            self.bar.value = 100
            print(self.report)
        self.open_fixed.disabled = self.compare.disabled = False
        return self.report

    def _show(self, what: str) -> None:
        from IPython.display import display

        fixed = self.report.dest if len(self.report.files) != 1 else self.report.files[0]
        with self.out:
            display(EXPLORE(fixed) if what == "explore" else diff(self.source, fixed))
