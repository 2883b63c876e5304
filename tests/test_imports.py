"""`import iris` must work in a task's venv, which holds only the runtime (pyzmq, msgpack,
cloudpickle, uvloop): cloud clients and the YAML parser load only where they are used."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_iris_loads_no_cloud_client_or_yaml():
    code = ("import sys, iris; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'yaml', 'google', 'requests', 'aiohttp', 'numpy', 'grpc', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_actors_layer_has_no_imports_inside_functions():
    """A function-level import hides an import cycle (issue 12): none in iris/actors."""
    package = Path(ROOT) / "iris" / "actors"
    hidden = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                hidden += [f"{path.name}:{n.lineno}" for n in ast.walk(node)
                           if isinstance(n, ast.Import | ast.ImportFrom)]
    assert not hidden, f"imports inside functions: {hidden}"
