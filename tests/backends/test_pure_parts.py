"""The pure parts: the map's book of items, Ray's resource plan, the progress bar, and the
Ray-shaped layer's refusals. No backend runs here."""

from __future__ import annotations

import io

import pytest

import iris
from iris.backends.iris.map_book import MapBook
from iris.backends.mapping import Progress
from iris.backends.ray.resources import plan
from iris.compat import ray as compat

# ---------------------------------------------------------------- the map's book

def test_items_are_handed_out_in_fair_shares_and_counted_once():
    book = MapBook(total=10, retries=1, tasks=2)
    first, lost = book.take(0, "a0", want=100)
    assert first == [0, 1] and lost == []  # half of what waits, split between 2 tasks
    second, _ = book.take(1, "b0", want=1)
    assert second == [2]
    assert book.report(0, "a0", first) == [0, 1]
    assert book.report(0, "a0", first) == []  # a repeated report counts nothing
    assert book.finished == 2 and not book.done


def test_a_new_attempt_proves_the_old_one_dead_and_its_items_run_again_first():
    book = MapBook(total=6, retries=1, tasks=2)
    held, _ = book.take(0, "a0", want=2)
    again, lost = book.take(0, "a1", want=6)  # task 0 restarted (preempted)
    assert lost == [] and again[:len(held)] == held  # back at the front, in order
    assert book.report(0, "a0", held) == []  # the dead attempt's late report is dropped
    assert book.tries == {i: 1 for i in held}


def test_an_item_whose_worker_dies_past_its_retries_is_lost():
    book = MapBook(total=1, retries=1, tasks=1)
    book.take(0, "a0", want=1)
    book.take(0, "a1", want=1)  # first death: retried
    _, lost = book.take(0, "a2", want=1)  # second death: retries=1 spent
    assert lost == [0] and book.done


def test_a_task_gone_for_good_returns_its_items_to_the_others():
    book = MapBook(total=4, retries=3, tasks=2)
    held, _ = book.take(0, "a0", want=4)
    assert book.task_ended(0) == []
    got, _ = book.take(1, "b0", want=4)
    assert set(held) <= set(got) | set(book.waiting)
    assert book.all_tasks_ended is False


# ---------------------------------------------------------------- Ray's resource plan

def test_cpu_memory_and_gpus_map_to_ray_options():
    assert plan(iris.Resources(cpu=2, memory="1GiB")).options == {"num_cpus": 2,
                                                                  "memory": 1 << 30}
    gpu = plan(iris.Resources(gpu="H100", count=8))
    assert gpu.options["num_gpus"] == 8 and gpu.options["accelerator_type"] == "H100"
    assert gpu.gang_bundles == ()


def test_a_gpu_gang_is_a_strict_spread_placement_group():
    gang = plan(iris.Resources(cpu=4, gpu="A100", count=8, hosts=4))
    assert gang.gang_bundles == tuple({"GPU": 8, "CPU": 4} for _ in range(4))


def test_a_single_host_tpu_maps_to_chips():
    tpu = plan(iris.Resources(tpu="v5litepod-8"))
    assert tpu.options["resources"] == {"TPU": 8}
    assert tpu.options["accelerator_type"] == "TPU-V5LITEPOD"


@pytest.mark.parametrize("resources, named", [
    (iris.Resources(tpu="v5litepod-16"), "cannot hold a whole slice"),
    (iris.Resources(tpu="v5litepod-8", count=2), "2 slices of v5litepod-8"),
    (iris.Resources(tpu="v6e-4,v5litepod-4"), "cannot express alternatives"),
    (iris.Resources(disk="10GB"), "no disk resource"),
])
def test_what_ray_cannot_express_is_refused_by_name(resources, named):
    with pytest.raises(iris.UnschedulableError, match=named):
        plan(resources)


# ---------------------------------------------------------------- progress bar

def test_progress_bar_redraws_at_most_ten_times_a_second_and_ends_with_a_line():
    now = [0.0]
    out = io.StringIO()
    bar = Progress(100, out, clock=lambda: now[0])
    for _ in range(50):
        bar.advance()  # no time passes: nothing drawn
    assert out.getvalue() == ""
    now[0] = 1.0
    bar.advance()
    assert "51/100" in out.getvalue() and "51/s" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\n")


def test_no_progress_bar_when_not_a_terminal(capsys):
    with iris.backend("inprocess"):
        iris.map(abs, range(10))
    assert "iris.map [" not in capsys.readouterr().err


# ---------------------------------------------------------------- the Ray-shaped layer

@pytest.mark.parametrize("options, named", [
    ({"num_gpus": 1}, "accelerator_type"),
    ({"resources": {"special": 1}}, "no custom resources"),
    ({"num_returns": 2}, "num_returns"),
    ({"runtime_env": {"working_dir": "."}}, "workspace"),
    ({"placement_group": None}, "not mapped"),
])
def test_remote_options_that_do_not_map_are_refused_at_decoration(options, named):
    with pytest.raises(compat.RefusedError, match=named):
        compat.remote(**options)(abs)


def test_ray_options_map_to_iris_resources():
    assert compat.resources_of({"num_cpus": 2, "memory": 1 << 30}) == iris.Resources(
        cpu=2, memory=1 << 30)
    assert compat.resources_of({"num_gpus": 2, "accelerator_type": "H100"}).count == 2
    assert compat.resources_of({"resources": {"TPU": 4},
                                "accelerator_type": "TPU-V4"}).tpu == "v4-8"


def test_refused_calls_say_what_to_use_instead():
    with pytest.raises(compat.RefusedError, match="iris.task_info"):
        compat.get_runtime_context()
    with pytest.raises(compat.RefusedError, match="IRIS_BACKEND"):
        compat.init(address="ray://10.0.0.1:10001")
    with pytest.raises(compat.RefusedError, match="detached"):
        compat.remote(lifetime="detached")(_Thing)
    with pytest.raises(TypeError, match="cannot be called directly"):
        compat.remote(abs)(1)


def test_get_actor_of_an_unknown_name_is_a_value_error_as_on_ray():
    with iris.backend("inprocess"), pytest.raises(ValueError, match="nope"):
        compat.get_actor("nope")


class _Thing:
    pass
