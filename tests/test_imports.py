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


def test_import_iris_starts_no_thread():
    """The worker's zygote refuses to fork from a process with a second thread, and
    numpy's thread pools start at import: `import iris` once loaded it and every zygote
    start failed."""
    code = "import os, iris; print(len(os.listdir('/proc/self/task')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60, check=True)
    assert out.stdout.strip() == "1"


def test_actors_layer_has_no_imports_inside_functions():
    """A function-level import of an iris module hides an import cycle (issue 12): none in
    iris/actors. A third-party module too heavy for `import iris` (numpy) may load late."""
    package = Path(ROOT) / "iris" / "actors"
    hidden = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                hidden += [f"{path.name}:{n.lineno}" for n in ast.walk(node)
                           if isinstance(n, ast.Import | ast.ImportFrom) and _names_iris(n)]
    assert not hidden, f"imports inside functions: {hidden}"


def _names_iris(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "iris"
    return any(alias.name.split(".")[0] == "iris" for alias in node.names)
