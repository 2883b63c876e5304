#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then lint and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages: iproute2 for network-namespace tests (present on most images).
if ! command -v ip >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && apt-get install -y -q iproute2
    else
        echo "warning: iproute2 missing and not root; network-namespace tests will skip" >&2
    fi
fi
# Debian's chromium for the dashboard's browser tests (playwright drives it; its own browser
# download does not work here). Without it and without root those tests skip, saying why.
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && apt-get install -y -q chromium
    else
        echo "warning: chromium missing and not root; dashboard browser tests will skip" >&2
    fi
fi
# Slurm's daemons and munge for the Slurm provider's tests, which run a real four-node Slurm
# cluster on this machine (tests/providers/slurm_cluster.py; about 20 s to install).
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
    else
        echo "warning: slurm-wlm/munge missing and not root; the Slurm tests will skip" >&2
    fi
fi
bash scripts/setup.sh test
.venv/bin/ruff check iris tests bench examples
.venv/bin/lint-imports
# Two workers: the machine has 2 cores. --timeout keeps a hung socket from eating CI's hour.
# --dist loadgroup: the tests marked xdist_group("ray") share one worker, so one Ray head
# starts per run (tests/backends), not one per worker.
exec .venv/bin/python -m pytest -n 2 --dist loadgroup -q --timeout 300 "$@"
