"""The Slurm provider's pieces: what Slurm prints, read back; a job as a slice; what a slice is
submitted as (never the token); its config refused when wrong; and, on the real daemons, one
squeue and one sinfo per list however many slices there are."""

from __future__ import annotations

import os
import stat

import pytest

from iris.base.errors import ConfigError
from iris.controller.config import parse_config
from iris.controller.providers.base import SliceState
from iris.controller.providers.slurm import slice_from_job
from iris.controller.providers.slurm_cli import (
    SlurmJob,
    SlurmNode,
    expand_hostlist,
    parse_duration,
    parse_sinfo,
    parse_squeue,
)
from iris.controller.providers.slurm_script import (
    SliceJob,
    batch_script,
    comment,
    parse_comment,
    sbatch_args,
)
from tests.providers.conftest import ZONE_A, slurm_contract_config, slurm_provider


@pytest.mark.parametrize(("text", "nodes"), [
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("gpu[01-02]-ib,login1", ["gpu01-ib", "gpu02-ib", "login1"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("n5", ["n5"]), ("", []), ("(null)", []),
])
def test_expand_hostlist_reads_slurm_node_lists(text, nodes):
    assert expand_hostlist(text) == nodes


@pytest.mark.parametrize(("text", "seconds"), [
    ("5:00", 300.0), ("1:02:03", 3723.0), ("2-00:00:00", 172800.0), ("1-02", 93600.0),
    ("UNLIMITED", None), ("NOT_SET", None), ("INVALID", None),
])
def test_parse_duration_reads_time_left(text, seconds):
    assert parse_duration(text) == seconds


def test_parse_squeue_keeps_a_comment_with_separators_whole():
    out = "42|s-1|RUNNING|None|gpu|n[1-2]|1:00:00|iris cluster=c group=g zone=gpu|x\n\n"
    (job,) = parse_squeue(out)
    assert (job.job_id, job.nodes, job.time_left_s) == ("42", ("n1", "n2"), 3600.0)
    assert job.comment == "iris cluster=c group=g zone=gpu|x"
    assert parse_comment(job.comment) == {"cluster": "c", "group": "g", "zone": "gpu|x"}
    assert parse_comment("someone else's job") == {}


def test_parse_sinfo_lists_each_node_once_and_knows_drains():
    out = "n1|10.0.0.1|idle|none\nn1|10.0.0.1|idle|none\nn2|10.0.0.2|draining|bad dimm\n" \
          "n3|10.0.0.3|drained*|fan\n"
    nodes = {n.name: n for n in parse_sinfo(out)}
    assert sorted(nodes) == ["n1", "n2", "n3"]
    assert [nodes[n].draining for n in ("n1", "n2", "n3")] == [False, True, True]


def _job(state: str, reason: str = "None", nodes=(), left=None) -> SlurmJob:
    return SlurmJob("7", "s-1", state, reason, "gpu", tuple(nodes), left,
                    comment("c", "g", "gpu"))


NODES = {"n1": SlurmNode("n1", "10.0.0.1", "mixed", "none"),
         "n2": SlurmNode("n2", "10.0.0.2", "draining", "bad dimm")}


@pytest.mark.parametrize(("job", "state", "words"), [
    (_job("PENDING", "Priority"), SliceState.CREATING, "pending (Priority)"),
    (_job("PENDING", "QOSMaxNodePerUserLimit"), SliceState.CREATING, "QOSMaxNodePerUserLimit"),
    (_job("PENDING", "PartitionNodeLimit"), SliceState.FAILED, "PartitionNodeLimit"),
    (_job("RUNNING", nodes=["n1"]), SliceState.READY, "running on n1"),
    (_job("COMPLETING", nodes=["n1"]), SliceState.PREEMPTED, "ended by Slurm"),
    (_job("PREEMPTED", nodes=["n1"]), SliceState.PREEMPTED, "preempted by Slurm"),
    (_job("CANCELLED", nodes=["n1"]), SliceState.PREEMPTED, "cancelled by Slurm"),
    (_job("TIMEOUT", nodes=["n1"]), SliceState.PREEMPTED, "timeout"),
    (_job("NODE_FAIL", nodes=["n1"]), SliceState.FAILED, "node_fail"),
    (_job("COMPLETED", nodes=["n1"]), SliceState.FAILED, "completed"),
])
def test_slice_from_job_maps_slurm_states_and_reasons(job, state, words):
    info = slice_from_job(job, "gpu", NODES, 600.0)
    assert info.state is state and words in info.detail
    assert (info.slice_id, info.group, info.zone) == ("s-1", "g", "gpu")


def test_slice_from_job_running_on_a_drained_node_or_near_its_limit_is_draining():
    drained = slice_from_job(_job("RUNNING", nodes=["n1", "n2"]), "gpu", NODES, 600.0)
    assert drained.state is SliceState.READY and "n2 is draining: bad dimm" in drained.draining
    assert [(h.host_id, h.address) for h in drained.hosts] == [("s-1-n1", "10.0.0.1"),
                                                              ("s-1-n2", "10.0.0.2")]
    ending = slice_from_job(_job("RUNNING", nodes=["n1"], left=300.0), "gpu", NODES, 600.0)
    assert "300 s left of its Slurm time limit" in ending.draining
    fine = slice_from_job(_job("RUNNING", nodes=["n1"], left=3600.0), "gpu", NODES, 600.0)
    assert fine.draining == ""


def _gpu_group(**slurm):
    config = parse_config({
        "name": "c", "controller": {"address": "tcp://10.0.0.9:7100"},
        "storage": {"log_dir": "/tmp/logs"},
        "regions": {"campus": {"zones": ["gpu"], "scale_groups": {"h100": {
            "provider": "slurm", "accelerator_type": "gpu", "accelerator_variant": "H100",
            "hosts_per_slice": 2, "accelerators_per_host": 8, "slurm": slurm}}}}})
    return config.scale_group("h100")


def _slice_job(**extra) -> SliceJob:
    return SliceJob(cluster="c", region="campus", zone="gpu", partition="gpu-part",
                    slice_id="campus-ab-h100-1", controller_address="tcp://10.0.0.9:7100",
                    iris_command=("/shared/venv/bin/python", "-m", "iris"),
                    slice_dir="/shared/iris/c/campus-ab-h100-1", env_cache="/shared/iris/c/envs",
                    token_file="/shared/iris/c/cluster.token", worker_host=None, **extra)


def test_sbatch_args_one_allocation_of_n_nodes_no_requeue_no_inherited_environment():
    group = _gpu_group(qos="high", account="lab", time_limit="2-00:00:00",
                       sbatch_args=["--reservation=r1"])
    args = sbatch_args(_slice_job(), group)
    for expected in ("--nodes=2", "--ntasks-per-node=1", "--no-requeue", "--export=NONE",
                     "--partition=gpu-part", "--qos=high", "--account=lab", "--gres=gpu:8",
                     "--time=2-00:00:00", "--reservation=r1", "--job-name=campus-ab-h100-1"):
        assert expected in args
    exported = sbatch_args(_slice_job(export_env=("SSL_CERT_FILE",)), group)
    assert "--export=SSL_CERT_FILE" in exported and "--export=NONE" not in exported


def test_batch_script_runs_one_worker_per_node_and_never_holds_the_token():
    script = batch_script(_slice_job(kill_wait_s=30.0, grace_time_s=120.0), _gpu_group())
    assert "srun --export=ALL --ntasks-per-node=1" in script
    assert "--token-file /shared/iris/c/cluster.token" in script
    assert "--preemption-notice slurm" in script and "accelerator_count=8" in script
    assert "export IRIS_SLURM_KILL_WAIT_S=30" in script
    assert "export IRIS_SLURM_GRACE_TIME_S=120" in script
    assert "IRIS_CLUSTER_TOKEN" not in script


@pytest.mark.parametrize(("slurm", "message"), [
    ({"time_limit": "tomorrow"}, "time_limit"),
    ({"mem_per_node": "lots"}, "mem_per_node"),
    ({"qos": "a b"}, "qos"),
    ({"sbatch_args": ["reservation=x"]}, "sbatch_args"),
    ({"constraints": "x"}, "did you mean 'constraint'"),
])
def test_slurm_group_config_mistakes_are_named(slurm, message):
    with pytest.raises(ConfigError, match=message):
        _gpu_group(**slurm)


def test_slurm_site_config_refuses_exporting_the_token_and_sections_of_other_providers():
    base = {"name": "c", "controller": {"address": "tcp://10.0.0.9:7100"},
            "storage": {"log_dir": "/tmp/logs"}}
    group = {"provider": "slurm", "accelerator_type": "cpu", "hosts_per_slice": 1}
    with pytest.raises(ConfigError, match="export_env.*IRIS_CLUSTER_TOKEN may not"):
        parse_config({**base, "regions": {"r": {"zones": ["p"], "scale_groups": {"g": group},
                                                "slurm": {"export_env": ["IRIS_CLUSTER_TOKEN"]}}}})
    with pytest.raises(ConfigError, match="provider is gcp, not slurm"):
        parse_config({**base, "gcp": {"project": "p"}, "regions": {"r": {
            "zones": ["p"], "scale_groups": {"g": {
                "accelerator_type": "cpu", "hosts_per_slice": 1, "slurm": {"qos": "x"}}}}}})


def test_provider_writes_the_token_0600_and_lists_with_one_squeue_and_one_sinfo(slurm,
                                                                               tmp_path):
    config = slurm_contract_config("calls")
    provider = slurm_provider(slurm, config, "tcp://127.0.0.1:9", tmp_path, "ab" * 32)
    token = tmp_path / "calls" / "cluster.token"
    assert token.read_text() == "ab" * 32 and stat.S_IMODE(os.stat(token).st_mode) == 0o600
    slurm.set_partition("za", State="DOWN")  # they stay queued: no worker starts
    group = config.scale_group("v5e-16")
    for i in range(6):
        provider.create_slice(group, ZONE_A, f"calls-{i}")
    provider.list_slices()  # the first asks the partitions' GraceTime once
    provider.commands.calls.clear()
    listed = provider.list_slices()
    assert len(listed) == 6 and {s.state for s in listed} == {SliceState.CREATING}
    assert all("PartitionDown" in s.detail for s in listed)
    assert dict(provider.commands.calls) == {"squeue": 1, "sinfo": 1}
    for s in listed:
        provider.delete_slice(s.slice_id)
    assert provider.list_slices() == []


def _worker_pids(slice_id: str) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"worker" in argv and f"{slice_id}-n".encode() in b" ".join(argv):
                pids.append(int(entry.name))
    return pids


def test_the_token_is_in_no_command_line_environment_or_script_slurm_keeps(slurm, tmp_path,
                                                                           wait_until):
    token = "5e" * 32
    config = slurm_contract_config("secret")
    provider = slurm_provider(slurm, config, "tcp://127.0.0.1:9", tmp_path, token)
    info = provider.create_slice(config.scale_group("v4-8"), "us-central2-b", "secret-1")
    job_id = info.detail.split()[1]
    pids = wait_until(lambda: _worker_pids("secret-1"), 60, "the worker process running")
    shown = slurm.run("scontrol", "show", "job", "--details", job_id)
    script = slurm.run("scontrol", "write", "batch_script", job_id, "-")
    assert "--token-file" in script and token not in shown + script
    for pid in pids:
        for what in ("cmdline", "environ"):
            with open(f"/proc/{pid}/{what}", "rb") as f:
                assert token.encode() not in f.read(), what
    provider.delete_slice("secret-1")
