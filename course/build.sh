#!/usr/bin/env bash
# `make course`: execute the course notebooks and render them into an offline static site in site/.
# Run from the repository root with .venv set up (`make dev`). Extra arguments go to
# build_site.py, e.g. `bash course/build.sh --only 00_tour --out /tmp/site`.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "course: .venv is missing; run 'make dev' first." >&2
  exit 2
fi
if [ ! -f model_explorer/widgets/static/explorer_widget.js ] || [ ! -x js/node_modules/.bin/esbuild ]; then
  echo "course: the widget JavaScript is not built; run 'make js' first." >&2
  exit 2
fi

# require.js and the widget manager, pinned by course/package-lock.json; reinstalled only when
# the lock file changes.
stamp=course/node_modules/.lock-installed
if [ ! -f "$stamp" ] || [ course/package-lock.json -nt "$stamp" ]; then
  (cd course && npm ci --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi

exec "$PY" course/build_site.py "$@"
