"""What a worker host's processes import at start: the parts only some paths use come on
first use (issue 33: ~180 workers and watchdogs per test run, and every host pays it too).
That those parts still work when first used is shown where they are used: attempts and
their logs (test_worker_actor.py), stacks and exec sessions (tests/cluster/test_inspect.py),
the watchdog stopping attempts and telling the controller (tests/faults/test_worker_faults.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _imported_after(statement: str) -> set[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["iris.logstore.shipper", "iris.logstore.config",
                                    "iris.worker.pyspy", "iris.worker.exec_sessions"])
def test_worker_start_imports_lazy_parts_not_until_used(module):
    assert module not in _imported_after("import iris.worker.command, iris.worker.main")


@pytest.mark.parametrize("module", ["iris.worker.adoption", "iris.worker.process",
                                    "iris.worker.credential", "iris.actors", "subprocess"])
def test_watchdog_start_imports_only_what_a_look_needs(module):
    assert module not in _imported_after("import iris.worker.watchdog")
