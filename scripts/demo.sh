#!/usr/bin/env bash
# Install Iris into .venv and run the RL trainer/rollout demo on an embedded local cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/iris demo "$@"
