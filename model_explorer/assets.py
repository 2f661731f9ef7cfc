"""Where the built widget JavaScript and CSS live, shared by the Explorer and the run cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC = Path(__file__).parent / "widgets" / "static"
MISSING_BUILD = """
export default {
  render({ el }) {
    el.className = "me-missing-build";
    el.textContent = "model_explorer: the widget JavaScript is not built. Run `make js` " +
      "(cd js && npm ci && npm run build) and re-run this cell.";
  },
};
"""


def asset(name: str, fallback: str = "") -> Any:
    path = STATIC / name
    return path if path.is_file() else fallback
