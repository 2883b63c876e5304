#!/usr/bin/env bash
# Create .venv and install Iris with the given extras (e.g. "test"). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# uv installs the packages: it is an Iris dependency already (per-job environments), it
# downloads and unpacks in parallel and keeps a cache across clones. On a fresh clone here
# pip took 1-3 minutes and ~60 CPU-s (it keeps no cache on this machine), uv ~3 CPU-s for
# the same set.
if [ ! -x .venv/bin/uv ]; then
    .venv/bin/python -m pip install -q uv 2>&1 | grep -v "^WARNING: Location" || true
fi
# .pyc files: Python writes each on first import, unless PYTHONDONTWRITEBYTECODE is set; then
# every process would compile what it imports again, so compile everything now (~35 CPU-s).
compile=()
[ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && compile=(--compile-bytecode)
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/uv pip install -q --python .venv/bin/python "${compile[@]}" -e "$spec"
.venv/bin/python -c "import iris" # fail loudly if the install did not work
