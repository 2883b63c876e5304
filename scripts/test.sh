#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then lint and run the suite.
#
# Options (before any pytest arguments, which are passed on):
#   --busy      keep one core busy with `stress-ng --cpu 1` during the run: the suite must
#               pass on a loaded machine (tests/README.md, "Busy machine").
#   --repeat N  run the suite N times in a row and count failed runs, to hunt flakes; e.g.
#               `bash scripts/test.sh --repeat 3 tests/cluster` for one directory.
#   --soak      run the soak tier instead (`-m soak`: scenarios that wait out long product
#               intervals, long randomised searches); CI runs it after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
busy=0
soak=0
repeat=1
while [ $# -gt 0 ]; do
    case "$1" in
        --busy) busy=1; shift ;;
        --soak) soak=1; shift ;;
        --repeat) repeat="${2:?--repeat needs a count}"; shift 2 ;;
        --repeat=*) repeat="${1#--repeat=}"; shift ;;
        *) break ;;
    esac
done
case "$repeat" in ''|*[!0-9]*|0) echo "--repeat: expected a count >= 1, got '$repeat'" >&2; exit 2 ;; esac
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
# Python writes no .pyc files where PYTHONDONTWRITEBYTECODE is set (some shells and CI images
# set it): then every process the suite starts (hundreds: controllers, workers, CLI commands,
# tasks) compiles what it imports again, ~0.45 CPU-s each for Iris's own modules, and each
# pytest worker rewrites every test module again. Each is compiled once instead.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh test
.venv/bin/ruff check iris tests bench examples
.venv/bin/lint-imports
.venv/bin/python -m compileall -q -j 0 iris tests >/dev/null
# pytest's assertion-rewritten test modules, written once on both cores instead of by each of
# the five workers at once on a fresh clone (~4.7 CPU-s apiece; tests/prewarm.py).
.venv/bin/python tests/prewarm.py
# Five workers on the machine's two cores: three quarters of the suite's test time is waiting
# (clusters' intervals, processes starting), which the other workers' tests fill. Units of
# work are whole modules, or a directory sharing one session fixture, or an xdist_group
# ("ray", "slurm"): tests/scheduling.py, tests/README.md. --timeout keeps a hung socket from
# eating CI's hour.
pytest_cmd=(.venv/bin/python -m pytest -n "${IRIS_TEST_WORKERS:-5}" --dist loadgroup -q
            --timeout 300)
[ "$soak" = 1 ] && pytest_cmd+=(-m soak)
if [ "$busy" = 1 ]; then
    # The busy-machine check (issue 33): one core kept busy by another process for the
    # whole run, as on a developer's laptop that is also building something.
    command -v stress-ng >/dev/null 2>&1 || { echo "--busy needs stress-ng" >&2; exit 2; }
    stress-ng --cpu 1 --timeout 0 --quiet &
    stress_pid=$!
    trap 'kill "$stress_pid" 2>/dev/null || true' EXIT
fi
failed=0
for ((run = 1; run <= repeat; run++)); do
    [ "$repeat" -gt 1 ] && echo "=== run $run of $repeat ===" >&2
    "${pytest_cmd[@]}" "$@" || { failed=$((failed + 1)); echo "=== run $run failed ===" >&2; }
done
[ "$repeat" -gt 1 ] && echo "=== $failed of $repeat runs failed ===" >&2
[ "$failed" = 0 ]
