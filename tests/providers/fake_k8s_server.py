"""A fake Kubernetes API server with Kueue, for tests: the REST paths and JSON shapes the
official client uses, on 127.0.0.1 port 0.

Not a cluster: no containers run. It keeps Jobs, pods, Secrets, Nodes and Kueue Workloads
as the JSON the real server returns (metadata with uid / resourceVersion /
creationTimestamp, status conditions) and plays the controllers Iris depends on:
- the Job controller: an unsuspended Job gets `parallelism` pods, one per completion index
  (annotation batch.kubernetes.io/job-completion-index); with backoffLimit 0 a pod lost or
  failed fails the Job (condition Failed, BackoffLimitExceeded);
- the scheduler and kubelet: a pod is bound to a node of its zone and Running with an IP at
  once (or stays Pending, unschedulable, while `hold_pods` is set);
- Kueue: a suspended Job labelled kueue.x-k8s.io/queue-name gets a Workload; it is admitted
  whole (QuotaReserved + Admitted, the Job unsuspended) only when its LocalQueue's quota has
  room for ALL its pods, else it stays pending with Kueue's "insufficient quota" message;
  `evict` is Kueue preempting it (Evicted, Job suspended again, pods gone).
Levers: `stock_out(zone)` (creates there refused 403 "exceeded quota", as a ResourceQuota
or admission policy refuses), `preempt(slice)` (its node is reclaimed: pods Failed with
DisruptionTarget), `cordon(node)`, `set_quota(queue, pods)`. `requests` logs every call.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.providers.fake_http import FakeHttpServer

INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE = "kueue.x-k8s.io/queue-name"
ZONE_LABEL = "topology.kubernetes.io/zone"
_STAMP = "2026-11-26T00:00:00Z"


def _selects(selector: str, labels: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code}, status=code)


@dataclass
class FakeKubernetes(FakeHttpServer):
    """`with FakeKubernetes() as k8s:`; point the client at `k8s.url`."""

    url: str = ""
    hold_pods: bool = False  # pods stay Pending (unschedulable) while set
    requests: list[tuple[str, str]] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)  # "ns/name" -> Job
    pods: dict[str, dict] = field(default_factory=dict)
    workloads: dict[str, dict] = field(default_factory=dict)
    secrets: dict[str, dict] = field(default_factory=dict)
    nodes: dict[str, dict] = field(default_factory=dict)
    quota: dict[str, int] = field(default_factory=dict)  # LocalQueue -> pods it may admit
    _stocked_out: set[str] = field(default_factory=set)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _ips: itertools.count = field(default_factory=lambda: itertools.count(2))

    _name = "fake kubernetes"
    _shutdown_s = 1.0

    # ---- levers ------------------------------------------------------------------------

    def stock_out(self, zone: str, on: bool = True) -> None:
        with self._lock:
            (self._stocked_out.add if on else self._stocked_out.discard)(zone)

    def set_quota(self, queue: str, pods: int) -> None:
        with self._lock:
            self.quota[queue] = pods
            self._reconcile()

    def preempt(self, slice_id: str, namespace: str = "iris") -> None:
        """The nodes under the slice are reclaimed: its pods fail with DisruptionTarget."""
        with self._lock:
            for pod in self._pods_of(f"{namespace}/{slice_id}"):
                pod["status"].update(phase="Failed", reason="Terminated",
                                     message="Pod was terminated in response to imminent "
                                             "node shutdown.")
                pod["status"]["conditions"].append(
                    {"type": "DisruptionTarget", "status": "True",
                     "reason": "TerminationByKubelet", "lastTransitionTime": _STAMP})
            self._fail(self.jobs[f"{namespace}/{slice_id}"], "BackoffLimitExceeded",
                       "Job has reached the specified backoff limit")

    def evict(self, slice_id: str, namespace: str = "iris") -> None:
        """Kueue preempts the slice's workload for a higher-priority one."""
        with self._lock:
            job = self.jobs[f"{namespace}/{slice_id}"]
            wl = self._workload_of(job)
            wl["status"]["conditions"] = [
                {"type": "Evicted", "status": "True", "reason": "Preempted",
                 "message": "Preempted to accommodate a workload (UID: x) due to "
                            "prioritization in the ClusterQueue", "lastTransitionTime": _STAMP},
                {"type": "Admitted", "status": "False", "reason": "Evicted",
                 "lastTransitionTime": _STAMP}]
            job["spec"]["suspend"] = True
            for pod in self._pods_of(f"{namespace}/{slice_id}"):
                del self.pods[self._key(pod)]
            wl["evicted"] = True

    def cordon(self, node: str) -> None:
        with self._lock:
            self.nodes[node]["spec"]["unschedulable"] = True

    def run_pods(self) -> None:
        with self._lock:
            self.hold_pods = False
            self._reconcile()

    # ---- the app -----------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._log])
        jobs = "/apis/batch/v1/namespaces/{ns}/jobs"
        app.router.add_post(jobs, self._create_job)
        app.router.add_get(jobs, self._list(lambda: self.jobs, "JobList"))
        app.router.add_get(jobs + "/{name}", self._get(lambda: self.jobs))
        app.router.add_delete(jobs + "/{name}", self._delete_job)
        pods = "/api/v1/namespaces/{ns}/pods"
        app.router.add_get(pods, self._list(lambda: self.pods, "PodList"))
        app.router.add_delete(pods + "/{name}", self._delete_pod)
        secrets = "/api/v1/namespaces/{ns}/secrets"
        app.router.add_post(secrets, self._create_secret)
        app.router.add_put(secrets + "/{name}", self._replace_secret)
        app.router.add_get("/api/v1/nodes", self._list_nodes)
        app.router.add_get("/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads",
                           self._list(lambda: self.workloads, "WorkloadList"))
        return app

    @web.middleware
    async def _log(self, request: web.Request, handler):
        with self._lock:
            self.requests.append((request.method, request.path))
        return await handler(request)

    def _list(self, table, kind: str):
        async def handler(request: web.Request) -> web.Response:
            ns, selector = request.match_info["ns"], request.query.get("labelSelector", "")
            with self._lock:
                items = [copy.deepcopy(o) for o in table().values()
                         if o["metadata"]["namespace"] == ns
                         and _selects(selector, o["metadata"].get("labels") or {})]
            return web.json_response({"kind": kind, "apiVersion": "v1",
                                      "metadata": {"resourceVersion": "1"}, "items": items})
        return handler

    def _get(self, table):
        async def handler(request: web.Request) -> web.Response:
            key = f"{request.match_info['ns']}/{request.match_info['name']}"
            with self._lock:
                obj = copy.deepcopy(table().get(key))
            if obj is None:
                return _status(404, "NotFound", f"jobs.batch \"{request.match_info['name']}\" "
                                                "not found")
            return web.json_response(obj)
        return handler

    async def _create_job(self, request: web.Request) -> web.Response:
        body, ns = await request.json(), request.match_info["ns"]
        name = body["metadata"]["name"]
        zone = body["spec"]["template"]["spec"].get("nodeSelector", {}).get(ZONE_LABEL)
        with self._lock:
            if f"{ns}/{name}" in self.jobs:
                return _status(409, "AlreadyExists", f"jobs.batch \"{name}\" already exists")
            if zone in self._stocked_out:
                return _status(403, "Forbidden", f"jobs.batch \"{name}\" is forbidden: exceeded "
                               f"quota: {zone}-quota, requested: count/jobs.batch=1, used: "
                               "count/jobs.batch=0, limited: count/jobs.batch=0")
            job = self._stamp(body, ns)
            job["status"] = {}
            self.jobs[f"{ns}/{name}"] = job
            if (job["metadata"].get("labels") or {}).get(QUEUE):
                self._new_workload(job)
            self._reconcile()
            return web.json_response(copy.deepcopy(job), status=201)

    async def _delete_job(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['ns']}/{request.match_info['name']}"
        with self._lock:
            job = self.jobs.pop(key, None)
            if job is None:
                return _status(404, "NotFound", "not found")
            for pod in self._pods_of(key):
                del self.pods[self._key(pod)]
            self.workloads = {k: w for k, w in self.workloads.items()
                              if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid")
                              != job["metadata"]["uid"]}
            self._reconcile()
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})

    async def _delete_pod(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['ns']}/{request.match_info['name']}"
        with self._lock:
            pod = self.pods.pop(key, None)
            if pod is None:
                return _status(404, "NotFound", "not found")
            job = self.jobs.get(f"{pod['metadata']['namespace']}/"
                                f"{pod['metadata']['labels'].get('job-name')}")
            if job is not None:
                self._fail(job, "BackoffLimitExceeded", "Job has reached the specified "
                                                        "backoff limit")
        return web.json_response(pod)

    async def _create_secret(self, request: web.Request) -> web.Response:
        body, ns = await request.json(), request.match_info["ns"]
        key = f"{ns}/{body['metadata']['name']}"
        with self._lock:
            if key in self.secrets:
                return _status(409, "AlreadyExists", "secret already exists")
            self.secrets[key] = self._stamp(body, ns)
        return web.json_response(self.secrets[key], status=201)

    async def _replace_secret(self, request: web.Request) -> web.Response:
        body, ns = await request.json(), request.match_info["ns"]
        with self._lock:
            self.secrets[f"{ns}/{request.match_info['name']}"] = self._stamp(body, ns)
        return web.json_response(body)

    async def _list_nodes(self, request: web.Request) -> web.Response:
        with self._lock:
            items = [copy.deepcopy(n) for n in self.nodes.values()]
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                  "items": items})

    # ---- the controllers ---------------------------------------------------------------

    def _stamp(self, body: dict, ns: str) -> dict:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion="1",
                    creationTimestamp=_STAMP)
        return obj

    def _new_workload(self, job: dict) -> None:
        meta = job["metadata"]
        name = f"job-{meta['name']}-{meta['uid'][:5]}"
        self.workloads[f"{meta['namespace']}/{name}"] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": str(uuid.uuid4()),
                         "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": meta["name"], "uid": meta["uid"]}]},
            "spec": {"queueName": meta["labels"][QUEUE],
                     "podSets": [{"name": "main", "count": job["spec"]["parallelism"]}]},
            "status": {"conditions": []}}

    def _workload_of(self, job: dict) -> dict:
        uid = job["metadata"]["uid"]
        return next(w for w in self.workloads.values()
                    if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid)

    def _reconcile(self) -> None:
        """Kueue admissions (whole workloads, in creation order), then pods for unsuspended
        Jobs, then the kubelet: what each controller would do by now."""
        used: dict[str, int] = {}
        for wl in self.workloads.values():
            if any(c["type"] == "Admitted" and c["status"] == "True"
                   for c in wl["status"]["conditions"]):
                q = wl["spec"]["queueName"]
                used[q] = used.get(q, 0) + wl["spec"]["podSets"][0]["count"]
        for wl in self.workloads.values():
            conds = wl["status"]["conditions"]
            if any(c["type"] == "Admitted" for c in conds) or wl.get("evicted"):
                continue
            q, n = wl["spec"]["queueName"], wl["spec"]["podSets"][0]["count"]
            room = self.quota.get(q, 0) - used.get(q, 0)
            if n <= room:
                used[q] = used.get(q, 0) + n
                wl["status"]["conditions"] = [
                    {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                     "message": f"Quota reserved in ClusterQueue {q}-cq"},
                    {"type": "Admitted", "status": "True", "reason": "Admitted",
                     "message": "The workload is admitted"}]
                owner = wl["metadata"]["ownerReferences"][0]["name"]
                self.jobs[f"{wl['metadata']['namespace']}/{owner}"]["spec"]["suspend"] = False
            else:
                wl["status"]["conditions"] = [{
                    "type": "QuotaReserved", "status": "False", "reason": "Pending",
                    "message": f"couldn't assign flavors to pod set main: insufficient quota "
                               f"for pods in flavor default, request > maximum capacity "
                               f"({n} > {room})"}]
        for key, job in self.jobs.items():
            if not job["spec"].get("suspend") and not job["status"].get("conditions") and \
                    not self._pods_of(key):
                self._start_pods(job)
        for pod in self.pods.values():
            if pod["status"]["phase"] == "Pending" and not self.hold_pods:
                self._run(pod)

    def _start_pods(self, job: dict) -> None:
        meta, template = job["metadata"], job["spec"]["template"]
        for i in range(job["spec"]["parallelism"]):
            name = f"{meta['name']}-{i}-{uuid.uuid4().hex[:5]}"
            self.pods[f"{meta['namespace']}/{name}"] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "uid": str(uuid.uuid4()), "annotations": {INDEX: str(i)},
                             "labels": {**template["metadata"]["labels"],
                                        "job-name": meta["name"]}},
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}
        job["status"] = {"active": job["spec"]["parallelism"], "startTime": _STAMP}

    def _run(self, pod: dict) -> None:
        zone = pod["spec"].get("nodeSelector", {}).get(ZONE_LABEL, "zone")
        node = f"node-{zone}-{len(self.nodes)}"
        self.nodes[node] = {"metadata": {"name": node, "labels": {ZONE_LABEL: zone}},
                            "spec": {}, "status": {}}
        n = next(self._ips)
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "podIP": f"10.8.{n // 250}.{n % 250 + 1}",
                         "conditions": [{"type": "PodScheduled", "status": "True"},
                                        {"type": "Ready", "status": "True"}]}

    def _fail(self, job: dict, reason: str, message: str) -> None:
        job["status"] = {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": reason, "message": message}]}

    def _pods_of(self, job_key: str) -> list[dict]:
        ns, name = job_key.split("/", 1)
        return [p for p in self.pods.values() if p["metadata"]["namespace"] == ns
                and p["metadata"]["labels"].get("job-name") == name]

    def _key(self, obj: dict) -> str:
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    def job(self, name: str, namespace: str = "iris") -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self.jobs[f"{namespace}/{name}"])


__all__ = ["FakeKubernetes"]
