"""Per-job uv environments: conflicting versions side by side, no leaks between jobs."""

from __future__ import annotations

import threading

import pytest

from iris.base.errors import InvalidRequestError
from iris.worker.envs import EnvironmentBuildError, normalize_requirement, read_requirements_file

WAIT_S = 120.0  # a cold uv cache downloads from the registry
SHOW = ("import importlib.util, iris.worker.task_runtime, cloudpickle;"
        "spec = importlib.util.find_spec('six');"
        "print(__import__('six').__version__ if spec else 'no six')")


def _run_in(env, attempts, lines):
    return attempts([str(env.python), "-c", SHOW], lines, env=env.activate({"PATH": "/bin"}))


def test_envs_conflicting_versions_run_side_by_side(env_cache, attempts, lines):
    old, new = env_cache.get(["six==1.15.0"]), env_cache.get(["six==1.16.0"])
    assert old.path != new.path
    old_lines, new_lines = type(lines)(), type(lines)()
    procs = [_run_in(old, attempts, old_lines), _run_in(new, attempts, new_lines)]
    assert all(p.wait(WAIT_S).ok for p in procs), (old_lines.items, new_lines.items)
    assert old_lines.text() == ["1.15.0"]
    assert new_lines.text() == ["1.16.0"]


def test_envs_job_without_pip_does_not_see_other_jobs_packages(env_cache, attempts, lines):
    env_cache.get(["six==1.16.0"])
    bare = env_cache.get([])
    assert _run_in(bare, attempts, lines).wait(WAIT_S).ok, lines.items
    assert lines.text() == ["no six"]


def test_envs_same_requirements_share_one_env(env_cache):
    a = env_cache.get(["Six == 1.16.0"])
    b = env_cache.get(["six==1.16.0"])
    assert a == b and env_cache.lookup(["six==1.16.0"]) == a


def test_envs_concurrent_builds_of_one_key_agree(env_cache):
    results, progress = [], []

    def build():
        results.append(env_cache.get(["SIX==1.15.0"], progress=progress.append))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(results) == 2 and results[0] == results[1] == env_cache.get(["six==1.15.0"])


def test_envs_failed_build_raises_with_uv_text_and_leaves_nothing(env_cache):
    lines = []
    with pytest.raises(EnvironmentBuildError, match="six==0.0.999"):
        env_cache.get(["six==0.0.999"], progress=lines.append)
    assert lines, "uv's output should be reported as progress"
    assert env_cache.lookup(["six==0.0.999"]) is None
    assert not (env_cache.config.root / env_cache.key_for(["six==0.0.999"])).exists()


@pytest.mark.parametrize("bad", ["", "--index-url=http://x", "-e .", "six\nevil", 3, "==1.0"])
def test_envs_bad_requirement_refused_with_pip_field(env_cache, bad):
    with pytest.raises(InvalidRequestError) as info:
        env_cache.get([bad])
    assert info.value.field == "pip"


def test_envs_requirement_string_instead_of_list_refused(env_cache):
    with pytest.raises(InvalidRequestError, match="list"):
        env_cache.get("six")


def test_envs_requirement_normalized_name():
    assert normalize_requirement(" Typing_Extensions >= 4 ") == "typing-extensions>=4"


def test_envs_requirements_file_skips_comments(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# pinned\nsix==1.16.0  # tiny\n\nattrs\n")
    assert read_requirements_file(path) == ["six==1.16.0", "attrs"]
