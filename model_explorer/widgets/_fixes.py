"""The Findings view's "Fix…" buttons: which findings a repair resolves (asked for when the
Findings view is first shown, since the plan may read headers again), and the FixDialog for
one finding, with only its fixes ticked, drawn inside the Explorer. Mixed into BaseView.

The FixDialog and the repairs never write over or into the source.
"""

from __future__ import annotations

from typing import Any


def fixable_findings(ckpt, sent: list[dict]) -> dict[str, Any]:
    """{"by_finding": {index: [fix names]}, "fixes": {name: summary}, "note": ...} for the
    findings the browser holds (`sent`, in the checkpoint's order). Never raises: a checkpoint
    the repairs cannot read has no Fix buttons and a note saying why."""
    if "://" in str(ckpt.source):
        return {"by_finding": {}, "fixes": {}, "note": "The repairs read local files: download it first."}
    from ..repairs import repair_plan

    try:
        plan = repair_plan(ckpt)
    except Exception as e:  # noqa: BLE001 - a plan that cannot be made is a note, not a broken view
        return {"by_finding": {}, "fixes": {}, "note": f"No repair plan: {e}"}
    by: dict[str, list[str]] = {}
    for i, f in enumerate(ckpt.findings[:len(sent)]):
        if f.code != sent[i].get("code"):  # the list changed since it was sent: match no further
            break
        names = [x.name for x in plan.fixes if f in x.resolves or f.code in x.codes]
        if names:
            by[str(i)] = names
    return {"by_finding": by, "fixes": {x.name: x.summary for x in plan.fixes}, "note": None}


class FixOps:
    """`_op_fixable` and `_op_fix_dialog`, answered by BaseView.answer."""

    _fixable: dict | None = None
    fix_widget = None
    """The FixDialog last opened from the Findings view (None before)."""

    def fixable(self) -> dict[str, Any]:
        if self._fixable is None:
            self._fixable = fixable_findings(self.checkpoint, list(self.findings))
        return self._fixable

    def _op_fixable(self):
        return self.fixable(), None

    def fix_dialog(self, finding: int):
        """A FixDialog with only the fixes that resolve finding number `finding` ticked."""
        from .fix_dialog import FixDialog

        fixes = self.fixable()["by_finding"].get(str(int(finding)))
        if not fixes:
            raise ValueError(f"Finding {finding} has no fix.")
        if self.fix_widget is not None:
            self.fix_widget.close()
        self.fix_widget = FixDialog(self.checkpoint, only=fixes)
        return self.fix_widget

    def _op_fix_dialog(self, finding: int):
        d = self.fix_dialog(finding)
        return {"ref": f"ipywidget:{d.model_id}", "fixes": d.selected(), "dest": d.dest.value}, None
