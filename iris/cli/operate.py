"""Operating a cluster from its config file: `iris cluster --config F start|stop|restart|status`,
`... controller start|stop|restart|status|run-local`, and the slice and vm verbs (slices.py).

Not the controller. Where it runs decides how: with a `controller.vm` section, `start`
makes (or finds) the controller's VM through the Compute Engine client, whose startup
script runs `iris controller serve --config` (and with it the autoscaler), then waits until
the controller answers; `stop` deletes every slice and then the VM. Without one (or with
--local), the controller runs on this machine as a daemon in the cluster's directory
(daemon.py, cluster_dir.py) and `stop` stops every slice of every provider through it, then
it, then whatever is left with the cluster's mark (operate_local.py). Slices are the
autoscaler's, made as the config says. The same verbs stand at the top level with their own
--config (`iris slice list --config F`, `iris controller status --config F`). Their
arguments, and which parsed arguments are these verbs (`wanted`), are parser_ops.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import InvalidRequestError, IrisError
from iris.cli import cluster_dir, operate_local, slices
from iris.cli.daemon import LocalController
from iris.cli.jobs import print_rows


def run(args: argparse.Namespace) -> int:
    if args.verb == "cluster" and args.action == "start" and args.config is None:
        raise InvalidRequestError("cluster start: pass --config F (a cluster config) or "
                                  "--local (an embedded cluster in the foreground)")
    kind = args.verb if args.verb in ("slice", "vm") else (
        args.action if args.action in ("slice", "vm") else None)
    op = _Operator(args.config, getattr(args, "local", False))
    try:
        if kind == "slice":
            return slices.slice_verb(args, op.providers, confirm)
        if kind == "vm":
            return op.vm(args)
        if args.verb == "controller":
            return op.act(args.action, args, whole=False)
        if args.action == "controller":
            return op.act(args.controller_action, args, whole=False)
        return op.act(args.action, args, whole=True)
    finally:
        op.close()


def confirm(question: str, yes: bool) -> bool:
    """Ask on a terminal; without one, only --yes proceeds (a script must say so)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise InvalidRequestError(f"{question} Not asked without a terminal: pass --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


class _Operator:
    def __init__(self, config_path: Path | None, local: bool = False):
        from iris.controller.config import load_config

        if config_path is None:
            raise InvalidRequestError("--config: required (the cluster config YAML)")
        self.config = load_config(config_path)  # refused whole before any cloud call
        try:
            self.text = Path(config_path).read_text()
        except OSError as exc:
            raise InvalidRequestError(f"{config_path}: {exc.strerror}") from exc
        # The controller runs here: no VM in the config, or --local.
        self.local = LocalController(self.config, config_path, cluster_dir.cluster_dir(
            self.config)) if local or not self.has_vm() else None
        self.providers = slices.Providers(self.config, self._controller_slices)
        self._vm: Any = None
        self._answered: bool | None = None  # as status found it; None: not asked yet

    def _controller_slices(self) -> list[dict]:
        if self._answered is False:
            raise IrisError(f"no answer at {self.config.controller.address}")
        return _call(self.config.controller.address, "slices", timeout_s=10.0)

    @property
    def controller_vm(self) -> Any:
        if self._vm is None:
            from iris.controller.providers.gcp_compute import ControllerVm

            self._vm = ControllerVm(self.config, self.text)
        return self._vm

    def has_vm(self) -> bool:
        vm = self.config.controller.vm
        return vm is not None and vm.enabled

    def close(self) -> None:
        self.providers.close()
        if self._vm is not None:
            self._vm.close()

    def act(self, action: str, args: argparse.Namespace, whole: bool) -> int:
        if action == "run-local":
            return self.run_local(args)
        if self.local is not None and action in ("start", "restart"):
            run = operate_local.start if action == "start" else operate_local.restart
            return run(self.local, args)
        if action == "start":
            info, made = self.controller_vm.create()
            print(f"controller VM {info.name} in {info.zone}: "
                  f"{'created' if made else 'found'} ({info.status}, {info.internal_ip})",
                  file=sys.stderr, flush=True)
            return self._answering(args, {"vm": info.name, "created": made})
        if action == "restart":
            self.controller_vm.reset()
            print(f"controller VM {self.controller_vm.vm.name} reset; waiting for it",
                  file=sys.stderr, flush=True)
            return self._answering(args, {"vm": self.controller_vm.vm.name, "reset": True})
        if action == "stop":
            return self.stop(args, whole)
        return self.status(args, whole)

    def _answering(self, args: argparse.Namespace, facts: dict) -> int:
        address = self.config.controller.address
        workers = _call(address, "list_workers", timeout_s=args.timeout)
        host = address.split("://", 1)[-1].rsplit(":", 1)[0]
        port = self.config.controller.vm.dashboard_port if self.has_vm() else 8265
        out = {**facts, "address": address, "dashboard": f"http://{host}:{port}",
               "workers": len(workers)}
        if args.json:
            print(json.dumps(out))
        else:
            print(f"controller answering at {address} ({len(workers)} workers)")
            print(f"  export IRIS_ADDRESS={address}")
            print(f"  dashboard: {out['dashboard']}")
        return 0

    def stop(self, args: argparse.Namespace, whole: bool) -> int:
        """Slices, then the VM, then whatever the autoscaler made meanwhile (a controller
        here: operate_local.stop)."""
        if self.local is not None:
            what = ("every slice of every provider, then the controller" if whole else
                    "the controller (and the local slices it runs)")
            if not confirm(f"stop {what} of cluster {self.config.name}?", args.yes):
                print("nothing stopped", file=sys.stderr)
                return 1
            return operate_local.stop(self.local, self.providers, args, whole)
        vm = self.controller_vm
        doomed = self.providers.all_slices() if whole else []
        what = " and ".join(filter(None, (
            f"{len(doomed)} slice(s)" if whole else "",
            f"the controller VM {vm.vm.name}" if vm else "")))
        if not confirm(f"delete {what} of cluster {self.config.name}?", args.yes):
            print("nothing deleted", file=sys.stderr)
            return 1
        deleted = self._delete_slices(doomed) if whole else []
        vm_deleted = vm.delete() if vm else False
        if vm:
            print(f"controller VM {vm.vm.name}: {'deleted' if vm_deleted else 'not found'}",
                  file=sys.stderr)
        if whole:  # the autoscaler may have made one while we deleted: it is gone now
            deleted += self._delete_slices(self.providers.all_slices())
        if args.json:
            print(json.dumps({"slices_deleted": deleted, "vm_deleted": vm_deleted}))
        return 0

    def _delete_slices(self, doomed: list) -> list[str]:
        for info in doomed:
            self.providers.find(info.slice_id)[1].delete_slice(info.slice_id)
            print(f"deleted slice {info.slice_id}", file=sys.stderr, flush=True)
        return [s.slice_id for s in doomed]

    def status(self, args: argparse.Namespace, whole: bool) -> int:
        out: dict[str, Any] = {"cluster": self.config.name,
                               "address": self.config.controller.address}
        if self.local is not None:
            out["controller"] = operate_local.status(self.local)
        elif self.has_vm():
            found = self.controller_vm.find()
            out["vm"] = {"name": self.controller_vm.vm.name, "zone": self.controller_vm.vm.zone,
                         "status": found.status if found else "NOT_FOUND",
                         "internal_ip": found.internal_ip if found else ""}
        # Not held here: it may still serve elsewhere (run-local with its own --state-dir,
        # another host), so it is asked, but briefly.
        probe_s = 2.0 if self.local is not None and not out["controller"]["running"] else 5.0
        try:
            out["workers"] = len(_call(out["address"], "list_workers", timeout_s=probe_s))
            out["answering"] = self._answered = True
            if whole:  # the autoscalers' own view, region by region
                out["regions"] = scale_group_rows(_call(out["address"], "snapshot",
                                                        timeout_s=5.0))
        except IrisError as exc:
            out["answering"], out["error"] = False, str(exc)
            self._answered = False  # not asked again for its slices
        if whole:
            out["scale_groups"] = self._groups()
        if args.json:
            print(json.dumps(out))
            return 0
        vm, here = out.get("vm"), out.get("controller")
        print(f"cluster {out['cluster']}: controller {out['address']} "
              f"{'answering, ' + str(out['workers']) + ' workers' if out['answering'] else 'not answering'}"
              + (f"; VM {vm['name']} ({vm['zone']}): {vm['status']}" if vm else "")
              + (f"; on this machine, pid {here['pid']}" if here and here["running"] else "")
              + (f"; not running here (cluster dir {here['cluster_dir']})"
                 if here and not here["running"] else ""))
        if whole:
            print_rows(out["scale_groups"], ["region", "group", "accelerator", "min", "max",
                                             "slices"], False)
            for g in out.get("regions", []):
                print(f"  autoscaler {g['region']}/{g['group']}: {g['ready']} ready, "
                      f"{g['booting']} booting, {g['preempted']} preempted"
                      f"{'; held back: ' + g['held'] if g['held'] else ''}")
        return 0

    def _groups(self) -> list[dict]:
        found = [s for _, s in self.providers.everything()]
        return [{"region": g.region, "group": g.name, "accelerator": g.accelerator_variant
                 or g.accelerator_type, "min": g.min_slices, "max": g.max_slices,
                 "provider": g.provider,
                 "slices": " ".join(f"{s.slice_id}:{s.state.value}" for s in found
                                    if s.group == g.name)}
                for g in self.config.scale_groups()]

    def vm(self, args: argparse.Namespace) -> int:
        rows = slices.vm_rows(self.providers, self.controller_vm if self.has_vm()
                              and self.local is None else None)
        if args.vm_action == "status":
            print_rows(rows, slices.VM_COLUMNS, args.json)
            return 0
        row = next((r for r in rows if r["vm_id"] == args.vm_id), None)
        if row is None:
            raise InvalidRequestError(f"vm: no VM {args.vm_id!r} in cluster {self.config.name} "
                                      f"(known: {', '.join(r['vm_id'] for r in rows)})")
        if args.vm_action == "get":
            print(json.dumps(row) if args.json else "\n".join(f"{k}: {v}" for k, v in row.items()))
            return 0
        if row["role"] == "controller":
            text = self.controller_vm.serial_output()
            print(json.dumps({"vm_id": row["vm_id"], "serial": text}) if args.json else text)
            return 0
        return _host_logs(self.config.controller.address, args.vm_id, args.json)

    def run_local(self, args: argparse.Namespace) -> int:
        """`iris controller serve` with this config, on this machine, in the foreground."""
        from iris.cli.main import _controller_serve

        ctl = self.config.controller
        return _controller_serve(argparse.Namespace(
            state_dir=args.state_dir or Path(ctl.state_dir or "iris-state"),
            bind=args.bind or ctl.bind or ctl.address, config=args.config, keys=None,
            dashboard_host=args.dashboard_host, dashboard_port=args.dashboard_port,
            restore=None, no_restore=False, take_over=False,  # as serve: newest, if empty
            report_fronts=0))


def scale_group_rows(snapshot: dict) -> list[dict]:
    """The controller snapshot's autoscaled groups: slices by state, and what holds them."""
    rows = []
    for region in snapshot.get("capacity") or []:
        for g in region.get("groups", []):
            states = [s.get("state") for s in g.get("slices", [])]
            rows.append({"region": region.get("region"), "group": g.get("group"),
                         "ready": states.count("READY"), "booting": states.count("CREATING"),
                         "preempted": states.count("PREEMPTED"), "held": g.get("held", "")})
    return rows


def _call(address: str, method: str, *args: Any, timeout_s: float) -> Any:
    import iris
    from iris.client.retry import call_controller

    with iris.connect(address) as ctx:
        return call_controller(ctx.node, address, method, args, timeout_s=timeout_s)


def _host_logs(address: str, host: str, as_json: bool) -> int:
    """What tasks printed on `host`, from the log store (it outlives the host)."""
    import iris
    from iris.client.jobs import JobHandle
    from iris.logstore.model import format_line

    with iris.connect(address) as ctx:
        for job in ctx.node.call(address, CONTROLLER_KEY, "list_jobs", (None, True),
                                 timeout_s=30).result():
            handle = JobHandle(job["job_id"], ctx)
            for task in handle.tasks():
                if task.get("worker_id") != host:
                    continue
                for line in handle.logs(task=task["index"]):
                    if as_json:
                        print(json.dumps({"job_id": job["job_id"], "task": line.task,
                                          "attempt": line.attempt, "stream": line.stream,
                                          "text": line.text}))
                    else:
                        text = format_line(line)
                        print(f"{job['job_id']} {text}", end="" if text.endswith("\n") else "\n")
    return 0


__all__ = ["confirm", "run"]
