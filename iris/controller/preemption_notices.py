"""A worker's preemption notice, applied on the controller's turn: requeue now, place nothing.

Not the watching (iris/worker/preemption_notice.py does that on the worker) nor the retry
policy (the job kernel's Preempted event spends the preemption budget). GCE gives a
preemptible VM 30 s between the notice and the power-off; without the notice the controller
learns of the loss only after DEFAULT_DEAD_AFTER_S of silence, plus the boot of whatever
replaces it. With it, the worker's attempts are requeued at once and the worker is held out
of placement; each task's new attempt starts once its old one, told to stop with the time
left as grace, has run its `iris.on_preempt` callbacks and exited (placement_pass.py:
at most one attempt of a task at a time).
"""

from __future__ import annotations

import logging
from typing import Any

from iris.base.ids import new_id
from iris.controller.jobs import events as ev
from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.wire import control

_log = logging.getLogger(__name__)
# What `draining` records for a noticed worker (other entries there name the slice a
# region is about to delete): the host takes no new work until it is gone.
NOTICE_DRAIN = "preemption-notice"


def apply_notice(svc: Any, worker_id: Any, address: Any, reason: Any,
                 time_left_s: Any) -> dict:
    """Requeue the worker's live attempts on the preemption budget, stop them with the time
    left as their grace, and hold the worker out of placement. Checked whole first; a notice
    from a registration that is not the current one (a worker already replaced) is a no-op.
    The answer lists the attempts requeued."""
    msg = control.decode(control.PreemptionNotice, {
        "worker_id": worker_id, "address": address, "reason": reason,
        "time_left_s": time_left_s})
    info = svc.desk.workers.workers.get(msg.worker_id)
    if info is None or info.address != msg.address:
        return {"requeued": []}
    svc.pushes.drain({msg.worker_id: NOTICE_DRAIN})  # its region must not count it
    # drained while it runs: the next push looks at it again
    held = sorted(a for a in svc.state.by_worker.get(msg.worker_id, ())
                  if svc.state.attempts[a].state in ACTIVE_ATTEMPT)
    why = f"preemption notice: {msg.reason} ({msg.time_left_s:.0f} s left)"
    _log.warning("worker %s: %s; requeueing %d attempts", msg.worker_id, why, len(held))
    svc.replan()
    svc.run_many([ev.Preempted(new_id("ev-"), a, why, grace_s=msg.time_left_s)
                  for a in held], schedule=True)
    return {"requeued": held}


__all__ = ["NOTICE_DRAIN", "apply_notice"]
