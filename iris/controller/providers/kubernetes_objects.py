"""What a Kubernetes slice is made of, and what its objects mean. Pure: dicts in, dicts out.

Not the API calls (kubernetes.py). One slice is ONE indexed Job (batch/v1) of
`hosts_per_slice` pods, each running `iris worker`; with a Kueue LocalQueue the Job is
created suspended and labelled for the queue, so Kueue admits it as ONE workload: the whole
gang or nothing. Manifests are the plain JSON the API server takes and returns (the official
client passes dicts through unchanged), so the shapes here are exactly Kubernetes'.

Objects -> slice (`slice_from_objects`):
- the Job being deleted -> DELETING;
- Job Failed: PREEMPTED when its pods were taken (evicted, preempted, their node shut down:
  the DisruptionTarget condition, or no pod that failed by itself), FAILED when a worker
  exited with an error; Job Complete (every worker exited) -> FAILED;
- Kueue evicted the workload (preempted by a higher-priority one) -> PREEMPTED;
- suspended, waiting for Kueue -> CREATING, detail Kueue's reason ("insufficient quota...");
- every index Running with an IP -> READY (hosts `<slice>-h<index>` at the pod IPs); a
  pod's node cordoned -> `draining`; else CREATING with the pods' scheduling reason.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from iris.base.resources import tpu_shape
from iris.controller.config import ScaleGroupConfig
from iris.controller.config_providers import (
    GKE_TPU_ACCELERATORS,
    KubernetesGroup,
    KubernetesSite,
)
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState

LABEL_CLUSTER, LABEL_GROUP = "iris.dev/cluster", "iris.dev/group"
LABEL_SLICE, LABEL_ZONE = "iris.dev/slice", "iris.dev/zone"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
TOKEN_DIR = "/var/run/iris"
TOKEN_KEY = "cluster.token"
# GKE's topology for the single-slice TPU shapes people run (chips -> topology), by family.
_TPU_TOPOLOGY = {
    "v5litepod": {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8",
                  128: "8x16", 256: "16x16"},
    "v6e": {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
            256: "16x16"},
    "v4": {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"},
    "v5p": {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"},
}
# Pod end reasons that mean "taken away", not "failed by itself".
_TAKEN = {"Evicted", "Preempted", "Shutdown", "NodeShutdown", "Terminated", "NodeLost",
          "DeletionByTaintManager", "TerminationByKubelet"}


@dataclass(frozen=True)
class PodSlice:
    """Everything one slice's Job is made from."""

    cluster: str
    region: str
    zone: str
    slice_id: str
    namespace: str
    controller_address: str
    token_secret: str


def token_secret(name: str, namespace: str, cluster: str, token: str) -> dict:
    """The Secret the workers' token file is mounted from (0400, never an env variable)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_CLUSTER: cluster}},
            "stringData": {TOKEN_KEY: token}}


def tpu_selectors(group: ScaleGroupConfig, opts: KubernetesGroup) -> dict[str, str]:
    """GKE's node selectors for a TPU slice type (accelerator and topology)."""
    shape = tpu_shape(group.accelerator_variant)
    topology = opts.tpu_topology or _TPU_TOPOLOGY.get(shape.family, {}).get(shape.chips)
    if topology is None:
        raise ValueError(f"no GKE topology known for {shape.name}: set the group's "
                         "kubernetes.tpu_topology")
    return {"cloud.google.com/gke-tpu-accelerator": GKE_TPU_ACCELERATORS[shape.family],
            "cloud.google.com/gke-tpu-topology": topology}


def job_manifest(s: PodSlice, group: ScaleGroupConfig, site: KubernetesSite) -> dict:
    opts = group.kubernetes or KubernetesGroup()
    labels = {LABEL_CLUSTER: s.cluster, LABEL_GROUP: group.name, LABEL_SLICE: s.slice_id,
              LABEL_ZONE: s.zone}
    requests = {"cpu": opts.cpu, "memory": opts.memory}
    limits: dict[str, str] = {}
    selector = {site.zone_label: s.zone, **dict(opts.node_selector)}
    tolerations = []
    if group.accelerator_type == "gpu":
        limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"] = str(group.accelerators_per_host)
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists",
                            "effect": "NoSchedule"})
    elif group.accelerator_type == "tpu":
        limits["google.com/tpu"] = requests["google.com/tpu"] = str(group.accelerators_per_host)
        selector.update(tpu_selectors(group, opts))
        tolerations.append({"key": "google.com/tpu", "operator": "Exists",
                            "effect": "NoSchedule"})
    pod: dict = {
        "restartPolicy": "Never",
        "nodeSelector": selector,
        "tolerations": tolerations,
        "containers": [{
            "name": "worker", "image": site.image, "command": ["sh", "-c", _command(s, group,
                                                                                  site)],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE_NAME",
                     "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            "volumeMounts": [{"name": "iris-token", "mountPath": TOKEN_DIR, "readOnly": True}],
        }],
        "volumes": [{"name": "iris-token",
                     "secret": {"secretName": s.token_secret, "defaultMode": 0o400}}],
    }
    if site.service_account:
        pod["serviceAccountName"] = site.service_account
    if opts.priority_class:
        pod["priorityClassName"] = opts.priority_class
    n = group.hosts_per_slice
    job_labels = dict(labels)
    if opts.local_queue:
        job_labels[KUEUE_QUEUE] = opts.local_queue
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": s.slice_id, "namespace": s.namespace, "labels": job_labels},
        "spec": {"completions": n, "parallelism": n, "completionMode": "Indexed",
                 # One lost pod loses the slice (a gang cannot run on part of it): no retry
                 # here, the autoscaler replaces the whole slice.
                 "backoffLimit": 0,
                 # Kueue admits a suspended Job as one workload and unsuspends it.
                 "suspend": bool(opts.local_queue),
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def _command(s: PodSlice, group: ScaleGroupConfig, site: KubernetesSite) -> str:
    attrs = {"zone": s.zone, "scale_group": group.name, "slice_id": s.slice_id,
             "cluster": s.cluster, "provider": "kubernetes",
             "preemptible": str(group.preemptible).lower()}
    if group.accelerator_variant:
        attrs["accelerator_type"] = group.accelerator_variant
        attrs["accelerator_count"] = str(group.accelerators_per_host)
    words = ["iris", "worker", "--controller", shlex.quote(s.controller_address),
             "--region", shlex.quote(s.region),
             "--worker-id", f"{shlex.quote(s.slice_id)}-h\"$JOB_COMPLETION_INDEX\"",
             "--work-dir", "/tmp/iris-worker",
             "--token-file", f"{TOKEN_DIR}/{TOKEN_KEY}",
             "--bind", f"\"tcp://$POD_IP:{site.worker_port}\""]
    for key, value in attrs.items():
        words += ["--attr", shlex.quote(f"{key}={value}")]
    words += ["--attr", "\"k8s_node=$NODE_NAME\""]
    install = (f"pip install --quiet {shlex.quote(site.iris_package)} && "
               if site.iris_package else "")
    return f"set -e; {install}exec " + " ".join(words)


def _conditions(obj: dict | None) -> dict[str, dict]:
    return {c.get("type", ""): c for c in ((obj or {}).get("status") or {}).get(
        "conditions") or []}


def _true(conds: dict[str, dict], kind: str) -> dict | None:
    c = conds.get(kind)
    return c if c is not None and c.get("status") == "True" else None


def _failed_by_itself(pod: dict) -> bool:
    """The worker exited with an error (a crash), not taken away with its node."""
    status = pod.get("status") or {}
    if status.get("reason") in _TAKEN or _true(_conditions(pod), "DisruptionTarget"):
        return False
    return any((term := (c.get("state") or {}).get("terminated")) is not None
               and term.get("exitCode", 0) != 0
               and term.get("reason") in ("Error", "OOMKilled", "ContainerCannotRun")
               for c in status.get("containerStatuses") or [])


def slice_from_objects(job: dict, pods: list[dict], workload: dict | None,
                       cordoned: dict[str, str]) -> SliceInfo:
    """Pure: what one slice's Job, pods, Kueue workload and nodes mean (module docstring).
    `cordoned`: node name -> why it takes no new pods."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    sid, group, zone = meta.get("name", ""), labels.get(LABEL_GROUP, ""), labels.get(
        LABEL_ZONE, "")
    n = int((job.get("spec") or {}).get("completions") or 1)
    live = {}
    for pod in pods:
        index = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
        if index is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            live[int(index)] = pod
    running = {i: p for i, p in live.items() if (p.get("status") or {}).get("phase") ==
               "Running" and (p.get("status") or {}).get("podIP")}
    hosts = tuple(HostInfo(f"{sid}-h{i}", running[i]["status"]["podIP"])
                  for i in sorted(running))

    def info(state: SliceState, detail: str, draining: str = "") -> SliceInfo:
        return SliceInfo(sid, group, zone, state, hosts, f"job {sid}: {detail}", draining)

    conds, wl = _conditions(job), _conditions(workload)
    if meta.get("deletionTimestamp"):
        return info(SliceState.DELETING, "being deleted")
    failed = _true(conds, "Failed")
    if failed:
        state = SliceState.FAILED if any(_failed_by_itself(p) for p in pods) \
            else SliceState.PREEMPTED
        return info(state, f"failed ({failed.get('reason', '')}: {failed.get('message', '')})")
    if _true(conds, "Complete"):
        return info(SliceState.FAILED, "every worker exited")
    evicted = _true(wl, "Evicted")
    if evicted and not _true(wl, "Admitted"):
        return info(SliceState.PREEMPTED, f"evicted by Kueue ({evicted.get('reason', '')}: "
                                          f"{evicted.get('message', '')})")
    if (job.get("spec") or {}).get("suspend"):
        why = (wl.get("QuotaReserved") or {}).get("message") or "waiting for Kueue"
        queue = labels.get(KUEUE_QUEUE, "")
        return info(SliceState.CREATING, f"queued in Kueue LocalQueue {queue}: {why}")
    if len(running) == n:
        nodes = [(p.get("spec") or {}).get("nodeName", "") for p in running.values()]
        off = [node for node in nodes if node in cordoned]
        drain = f"Kubernetes node {off[0]} {cordoned[off[0]]}" if off else ""
        return info(SliceState.READY, f"{n} pods running", drain)
    waiting = [c.get("message", "") for p in live.values()
               for c in (p.get("status") or {}).get("conditions") or []
               if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    return info(SliceState.CREATING, f"{len(running)} of {n} pods running"
                + (f"; {waiting[0]}" if waiting else ""))


__all__ = ["INDEX_ANNOTATION", "KUEUE_JOB_UID", "KUEUE_QUEUE", "LABEL_CLUSTER", "LABEL_GROUP",
           "LABEL_SLICE", "LABEL_ZONE", "PodSlice", "job_manifest", "slice_from_objects",
           "token_secret", "tpu_selectors"]
