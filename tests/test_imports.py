"""`import iris` must work in a task's venv, which holds only the runtime (pyzmq, msgpack,
cloudpickle, uvloop): cloud clients and the YAML parser load only where they are used."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_iris_loads_no_cloud_client_or_yaml():
    code = ("import sys, iris; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'yaml', 'google', 'requests', 'aiohttp', 'numpy', 'grpc', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
