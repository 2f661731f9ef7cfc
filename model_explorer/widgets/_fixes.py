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

    # -- the same dialog as data, for front ends that draw no ipywidgets (marimo) ----------------

    _fix_report = None

    def _op_fix_form(self, finding: int):
        """The Fix… dialog as data: the plan, every fix (ticked: those that resolve finding
        number `finding`) and the copy's new name; the browser draws it (fixpanel.js)."""
        from ..repairs import repair_plan
        from .fix_dialog import fixed_name

        fixes = self.fixable()["by_finding"].get(str(int(finding)))
        if not fixes:
            raise ValueError(f"Finding {finding} has no fix.")
        plan = repair_plan(self.checkpoint)
        wanted = set(fixes)
        return {"plan": str(plan) if plan.fixes or plan.unfixable else "Nothing to fix.",
                "fixes": [{"name": f.name, "label": str(f), "ticked": f.matches(wanted)} for f in plan.fixes],
                "dest": fixed_name(self.checkpoint.source)}, None

    def _op_fix_write(self, fixes: list[str], dest: str):
        """Write the copy with `fixes` to `dest` (never over the source); the report as text."""
        import os

        from ..repairs import RepairError, repair

        try:
            report = repair(os.fspath(self.checkpoint.source), dest, fixes=[str(f) for f in fixes])
        except (RepairError, OSError) as e:
            return {"ok": False, "text": f"Not written: {e}"}, None
        self._fix_report = report
        return {"ok": True, "text": str(report)}, None

    def _fixed_target(self) -> str:
        report = self._fix_report
        if report is None:
            raise ValueError("No fixed copy was written yet.")
        return report.dest if len(report.files) != 1 else report.files[0]

    def _op_fix_explore(self):
        """An Explorer of the fixed copy, drawn in the dialog."""
        # The Explorer this is mixed into makes it (importing Explorer here would be an import cycle).
        self.fixed_explorer = self._new_explorer(self._fixed_target())
        return {"ref": f"anywidget:{self.fixed_explorer.model_id}"}, None

    def _op_fix_compare(self):
        """mx.diff of the source and the fixed copy, as text."""
        from ..opener import diff

        table = diff(self.checkpoint.source, self._fixed_target())
        return {"text": table.to_string() if hasattr(table, "to_string") else str(table)}, None
