"""Every Python example in docs/migrating-from-ray.md is valid Python, and the ones that
need no other cluster run as written, in process (as a reader's first try would)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import iris
from iris.compat import ray

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-ray.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
# Blocks that name a cluster elsewhere (ray://, tcp://) are only compiled.
RUNNABLE = [b for b in BLOCKS if "ray://" not in b and "tcp://" not in b]


def test_the_doc_has_examples_to_run():
    assert len(RUNNABLE) >= 2, "docs/migrating-from-ray.md lost its examples: update this test"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_example_is_valid_python(index):
    compile(BLOCKS[index], f"{DOC.name} example {index}", "exec")


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_examples_run_as_written_in_process(index, capsys):
    namespace = {"__name__": "__main__"}  # its functions travel by value, as from a script
    try:
        with iris.backend("inprocess"):
            exec(compile(RUNNABLE[index], f"{DOC.name} example", "exec"), namespace)
    finally:
        ray.shutdown()
    assert iris.backend_kind() == "none"


def test_the_ray_shaped_example_prints_what_ray_would(capsys):
    (example,) = [b for b in RUNNABLE if "from iris.compat import ray" in b]
    exec(compile(example, f"{DOC.name} example", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.split() == ["[0,", "1,", "4,", "9]", "14", "19", "20"]
