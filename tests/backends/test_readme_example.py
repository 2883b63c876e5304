"""The README's first example (a trainer actor, rollout tasks that find it by name) runs
unchanged on the in-process backend: only its `with` line names another backend. No
cluster is started: the example's logic is what is under test here (tests/cluster runs
jobs and actors on real workers)."""

from __future__ import annotations

import re
from pathlib import Path

import iris

README = Path(__file__).resolve().parents[2] / "README.md"
CLUSTER_LINE = "with iris.local_cluster(workers=2) as cluster:"


def _example() -> str:
    section = README.read_text().split("## Jobs and actors", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert CLUSTER_LINE in code, "the README example changed: update this test"
    return code.replace(CLUSTER_LINE, 'with iris.backend("inprocess") as cluster:')


def test_readme_example_runs_in_process(capsys):
    namespace = {"__name__": "__main__"}  # its functions travel by value, as from a script
    exec(compile(_example(), "README.md", "exec"), namespace)
    assert capsys.readouterr().out.strip().splitlines()[-1] == "[10, 10, 10, 10]"
    assert iris.backend_kind() == "none"  # the block closed the backend it opened
