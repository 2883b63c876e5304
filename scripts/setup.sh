#!/usr/bin/env bash
# Create .venv and install Iris with the given extras (e.g. "test"). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install -q -e "$spec" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import iris" # fail loudly if the install did not work
