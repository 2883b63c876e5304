"""The Ray backend: `iris.*` on a running Ray cluster, with Iris's semantics where Ray's differ.

Not Ray's API (backends keep Ray out of user code). A job is `replicas` Ray tasks, each
placed with the job's resources (resources.py; a GPU gang through a placement group); its
env and pip become the tasks' runtime_env, which Ray runs in worker processes of their own
(the isolation per submit Ray allows). Names are Iris's: an actor is a Ray named actor in
the Ray namespace "iris" whose name is its full Iris path, looked up in the caller's
namespace then each enclosing one. A map is one Ray task per item, at most `max_parallel`
in flight, retried by Ray when its worker dies. `ray` is an optional dependency
(`pip install iris[ray]`); it is imported only when this backend is used.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from iris.actors.current import current_context
from iris.actors.refs import ActorGroup, ActorRef
from iris.backends import common
from iris.backends.mapping import MapOptions
from iris.backends.ray import runtime
from iris.backends.ray.actors import RayActorRef, actor_class
from iris.backends.ray.jobs import RayJob
from iris.backends.ray.resources import plan
from iris.base.clock import SYSTEM_CLOCK
from iris.base.errors import ActorNotFoundError, ConfigError, NotFoundError
from iris.base.ids import join_path, parent_path
from iris.base.resources import Resources

# How long a resolve waits between lookups of a name not yet registered.
_RESOLVE_POLL_S = 0.05


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("the Ray backend needs Ray: pip install 'iris[ray]'") from exc
    return ray


class RayBackend:
    """`iris.*` on Ray. `address`: a Ray GCS address ("host:port"), or None for the Ray
    this process is connected to (or a new local head when it is connected to none)."""

    kind = "ray"

    def __init__(self, address: str | None = None, *, namespace: str = "/",
                 _connect: bool = True):
        self.namespace = namespace
        self.address = address or "ray"
        self._owns = False
        self._seq = itertools.count(1)
        self._remotes: dict[Any, Any] = {}  # functions and classes exported once
        if _connect:
            ray = _ray()
            if not ray.is_initialized():
                ray.init(address=address, namespace=runtime.RAY_NAMESPACE,
                         include_dashboard=False, log_to_driver=True)
                self._owns = True

    @classmethod
    def attached(cls, namespace: str) -> RayBackend:
        """A view for code running inside a Ray worker (already connected)."""
        return cls(namespace=namespace, _connect=False)

    def __repr__(self) -> str:
        return f"RayBackend({self.address!r}, namespace={self.namespace!r})"

    # ------------------------------------------------------------ names

    def full_name(self, name: str) -> str:
        return join_path(self.namespace, name)

    def scope(self, name: str) -> list[str]:
        if name.startswith("/"):
            return [join_path("/", name)]
        names, namespace = [], self.namespace or "/"
        while True:
            names.append(join_path(namespace, name))
            if namespace == "/":
                return names
            namespace = parent_path(namespace)

    def serve(self, cls: type, name: str, *args: Any, **kwargs: Any) -> ActorRef:
        """Run `cls` as a named Ray actor (Ray has no actors hosted in the driver)."""
        ref, _ = self.spawn(cls, *args, name=name)
        return ref

    def resolve(self, name: str, timeout: float = 30.0) -> ActorRef:
        found = self._lookup(name, timeout)
        if not found:
            tried = " or ".join(repr(n) for n in self.scope(name))
            raise ActorNotFoundError(f"no actor registered as {tried} after waiting "
                                     f"{timeout} s (Ray namespace {runtime.RAY_NAMESPACE!r})",
                                     actor=name)
        return found[0]

    def resolve_all(self, name: str, timeout: float = 0.0) -> ActorGroup:
        found = self._lookup(name, timeout)
        return ActorGroup(found[0].name.split("/#")[0] if found else self.full_name(name),
                          found)

    def _lookup(self, name: str, timeout: float) -> list[RayActorRef]:
        ray = _ray()
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        gate = threading.Event()
        while True:
            names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["namespace"] == runtime.RAY_NAMESPACE}
            for full in self.scope(name):
                members = [full] if full in names else sorted(
                    (n for n in names if n.startswith(full + "/#")),
                    key=lambda n: int(n.rsplit("#", 1)[1]))
                refs = [self._ref(m) for m in members]
                refs = [r for r in refs if r is not None]
                if refs:
                    return refs
            if SYSTEM_CLOCK.monotonic() >= deadline:
                return []
            gate.wait(_RESOLVE_POLL_S)

    def _ref(self, member: str) -> RayActorRef | None:
        try:
            handle = _ray().get_actor(member, namespace=runtime.RAY_NAMESPACE)
        except ValueError:  # gone between the listing and the lookup
            return None
        return RayActorRef(member.split("/#")[0], handle)

    def list_actors(self, prefix: str = "/") -> list[dict]:
        return [{"name": a["name"], "address": "ray", "owner": "ray"}
                for a in _ray().util.list_named_actors(all_namespaces=True)
                if a["namespace"] == runtime.RAY_NAMESPACE and a["name"].startswith(prefix)]

    # ------------------------------------------------------------ jobs and actors

    def _job_id(self, label: str) -> str:
        user = os.environ.get("IRIS_USER") or os.environ.get("USER") or "user"
        return f"/{user}/{label}-{os.getpid()}-{next(self._seq)}"

    def submit(self, entry: Callable | list[str], *args: Any, name: str | None = None,
               resources: Resources | None = None, replicas: int = 1,
               env: dict[str, str] | None = None, pip: Any = (),
               max_retries_failure: int | None = None,
               max_retries_preemption: int | None = None, timeout: float | None = None,
               **_: Any) -> RayJob:
        _ray()  # a clear error when Ray is not installed
        how = plan(resources or Resources())
        label = name or getattr(entry, "__name__", "job").strip("<>").replace("_", "-")
        job_id = self._job_id(label)
        namespace = "/" + "/".join(job_id.strip("/").split("/")[:2])
        if callable(entry):
            common.check_args_picklable(entry, args)
        # Handed to Ray as objects, not pre-pickled: Ray must see ObjectRefs inside them.
        payload = (entry, args, {}) if callable(entry) else list(entry)
        runtime_env = _runtime_env_of(env, pip)
        options = dict(how.options, max_retries=3 if max_retries_preemption is None
                       else max_retries_preemption,
                       retry_exceptions=bool(max_retries_failure))
        options.update(runtime_env)
        remote = self._remote(runtime.run_task)
        group = self._placement_group(how.gang_bundles)
        refs = []
        for i in range(replicas):
            extra = self._in_group(group, i % max(len(how.gang_bundles), 1))
            refs.append(remote.options(**options, **extra).remote(
                payload, namespace, common.TaskInfo(job_id, i, replicas)))
        job = RayJob(job_id, refs, timeout, group)
        common.adopt(job)
        return job

    def _remote(self, fn: Callable) -> Any:
        if fn not in self._remotes:
            self._remotes[fn] = _ray().remote(fn)
        return self._remotes[fn]

    @staticmethod
    def _placement_group(bundles: tuple) -> Any:
        if not bundles:
            return None
        from ray.util.placement_group import placement_group

        return placement_group(list(bundles), strategy="STRICT_SPREAD")

    @staticmethod
    def _in_group(group: Any, index: int) -> dict:
        if group is None:
            return {}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index)}

    def spawn(self, cls: type, *args: Any, name: str, resources: Resources | None = None,
              replicas: int = 1, env: dict | None = None, pip: Any = (),
              timeout: float = 120.0, **_: Any) -> tuple[ActorRef | ActorGroup, RayJob]:
        ray = _ray()
        how = plan(resources or Resources())
        full = self.full_name(name)
        key = (cls, self.namespace)
        if key not in self._remotes:  # one export per class: Ray ships each new one
            self._remotes[key] = ray.remote(actor_class(cls, self.namespace))
        wrapped = self._remotes[key]
        refs, handles = [], []
        for i in range(replicas):
            member = full if replicas == 1 else f"{full}/#{i}"
            handle = wrapped.options(name=member, namespace=runtime.RAY_NAMESPACE,
                                     max_restarts=0, **_actor_options(how.options),
                                     **_runtime_env_of(env, pip)).remote(*args)
            handles.append(handle)
            refs.append(RayActorRef(full, handle))
        try:  # constructed (or raised), within the spawn's timeout
            ray.get([h.__ray_ready__.remote() for h in handles], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            for handle in handles:
                ray.kill(handle)
            raise ActorNotFoundError(f"{full}: not started within {timeout} s (Ray could not "
                                     f"place it: {how.options})", actor=full) from None
        except Exception as exc:
            for handle in handles:
                ray.kill(handle)
            raise runtime.translate(exc, f"constructing {full}") from None
        job = RayJob(self._job_id(name.strip("/").replace("/", "-")), [], None, None,
                     actors=handles)
        common.adopt(job)
        return (refs[0] if replicas == 1 else ActorGroup(full, refs)), job

    # ------------------------------------------------------------ map

    def map_stream(self, fn: Callable, items: list, opts: MapOptions) -> Iterator[tuple]:
        ray = _ray()
        how = plan(opts.resources)
        if how.gang_bundles:
            raise ConfigError("iris.map items are single tasks: a gang (hosts > 1) does "
                              "not apply")
        remote = self._remote(runtime.run_item).options(
            **how.options, max_retries=opts.retries, retry_exceptions=False,
            **_runtime_env_of(opts.env, opts.pip))
        fn_ref = ray.put(fn)
        window = opts.max_parallel or len(items)
        pending: dict[Any, int] = {}
        queue = iter(range(len(items)))
        try:
            while True:
                for index in itertools.islice(queue, max(window - len(pending), 0)):
                    pending[remote.remote(fn_ref, items[index], self.namespace)] = index
                if not pending:
                    return
                ready, _ = ray.wait(list(pending), num_returns=min(len(pending), 256),
                                    timeout=0.05)
                if not ready:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                try:  # one get for the whole batch; item by item only when one failed
                    values = ray.get(ready)
                except Exception:
                    values = None
                for n, ref in enumerate(ready):
                    index = pending.pop(ref)
                    if values is not None:
                        yield index, True, values[n]
                        continue
                    try:
                        yield index, True, ray.get(ref)
                    except Exception as exc:
                        yield index, False, runtime.translate(exc, f"iris.map input {index}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    # ------------------------------------------------------------ objects

    def put(self, value: Any) -> common.ObjectRef:
        ref = _ray().put(value)
        return common.ObjectRef(ref.hex(), self.kind, ref)

    def get_object(self, ref: common.ObjectRef, timeout: float | None = None) -> Any:
        ray = _ray()
        try:
            return ray.get(ref.owner, timeout=timeout)
        except ray.exceptions.ObjectLostError as exc:
            raise NotFoundError(f"{ref!r}: lost ({type(exc).__name__})") from exc
        except Exception as exc:
            raise runtime.translate(exc, repr(ref)) from exc

    def free(self, ref: common.ObjectRef) -> None:
        """Nothing to do: Ray frees an object once no reference to it is left (drop the
        ObjectRef). Later gets through refs still held keep working, unlike on Iris."""

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._owns:
            self._owns = False
            _ray().shutdown()

    def __enter__(self) -> RayBackend:
        self._token = current_context.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        current_context.reset(self._token)
        self.close()


def _runtime_env_of(env: dict | None, pip: Any) -> dict:
    """{"runtime_env": ...} for a job's env and pip, or {} when it needs none."""
    runtime_env: dict = {}
    if env:
        runtime_env["env_vars"] = dict(env)
    missing = _not_installed(pip)
    if missing:
        runtime_env["pip"] = missing
    return {"runtime_env": runtime_env} if runtime_env else {}


def _not_installed(requirements: Any) -> list[str]:
    """The requirements this interpreter (which Ray's workers share) lacks: only those need
    a runtime_env of their own, which Ray builds per job (a minute with numpy)."""
    missing = []
    for requirement in requirements or ():
        name = re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0]
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement)
    return missing


def _actor_options(options: dict) -> dict:
    """Task options that also apply to an actor (Ray actors take no retry options)."""
    return {k: v for k, v in options.items() if k in ("num_cpus", "num_gpus", "memory",
                                                      "resources", "accelerator_type")}
