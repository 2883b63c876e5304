"""Who holds a registry name: the task attempt serving it, and which holder is current. Pure.

A name served from inside a task carries its holder: the job id, the task index and the
attempt id (the controller's fencing token, $IRIS_ATTEMPT_ID), and whether the name is the
job's alone (`sole`: an actor `iris.spawn` started; a name many jobs join, such as a weights
publisher's subscribers, is not). The rules:
- An attempt's names are withdrawn when the controller ends that attempt, and the attempt may
  not register again (`Withdrawn` remembers it for WITHDRAWN_KEEP_S): a stopping process's
  re-registration cannot bring a dead actor back.
- Among the live entries of one name, a newer attempt of a task hides that task's older
  attempt (one task never runs two), and among `sole` entries a newer job hides an older
  one (newer: registered the name later). A dead holder nobody reported (its host vanished)
  is thus passed over as soon as its successor registers, not after its lease. Entries
  without a holder (served by a process outside any task) are never hidden: several of
  them are replicas, as before.
- A `sole` name is taken only from holders proved gone (`takeover_wait`): another job's
  live entry, or one without a holder, makes a spawn under it wait out the lease it had
  when first seen; renewed past it, its holder lives, and the spawn is refused.
- With a verifier (the controller's registry), a holder is proved: each attempt is launched
  with $IRIS_ATTEMPT_PROOF, an HMAC of its job, task and attempt under the controller's
  secret. Registering with a holder, and unregistering or renewing an entry that has one,
  needs its proof (`refuse_unproved`), and a live `sole` name is not registered beside by
  any other job's process (`refuse_shadow`). Entries without a holder keep the rules above.
"""

from __future__ import annotations

import hmac
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Protocol, TypeVar

from iris.base.errors import ConflictError, InvalidRequestError, PermissionDeniedError

# A withdrawn attempt is refused for this long: far past any stop's grace period.
WITHDRAWN_KEEP_S = 600.0
# At most this many withdrawn attempts remembered (the oldest go first): bounded memory.
MAX_WITHDRAWN = 100_000


class Holder(NamedTuple):
    job: str
    task: int
    attempt: str
    sole: bool = False


NO_HOLDER = Holder("", -1, "")
PROOF_ENV = "IRIS_ATTEMPT_PROOF"
# Does this proof prove that holder (its job, task and attempt; `sole` is not proved)?
Verify = Callable[[Holder, "str | None"], bool]
_KEYS = {"job", "task", "attempt"}


def check_holder(name: str, raw: object) -> Holder:
    """A register call's `holder` (None, or {"job", "task", "attempt"[, "sole"]}) as a
    Holder."""
    if raw is None:
        return NO_HOLDER
    if not isinstance(raw, dict) or not _KEYS <= set(raw) <= _KEYS | {"sole"}:
        raise InvalidRequestError(f"register {name}: holder must be a dict of job, task, "
                                  f"attempt and optionally sole, got {raw!r:.120}", "holder")
    job, task, attempt = raw["job"], raw["task"], raw["attempt"]
    if not isinstance(job, str) or not 0 < len(job) <= 1024:
        raise InvalidRequestError(f"register {name}: holder.job must be a non-empty string of "
                                  "at most 1024 characters", "holder.job")
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise InvalidRequestError(f"register {name}: holder.task must be a task index (an "
                                  f"integer >= 0), got {task!r:.40}", "holder.task")
    if not isinstance(attempt, str) or not 0 < len(attempt) <= 256:
        raise InvalidRequestError(f"register {name}: holder.attempt must be a non-empty "
                                  "string of at most 256 characters", "holder.attempt")
    sole = raw.get("sole", False)
    if not isinstance(sole, bool):
        raise InvalidRequestError(f"register {name}: holder.sole must be true or false",
                                  "holder.sole")
    return Holder(job, task, attempt, sole)


def holder_from_env(env: Mapping[str, str]) -> dict | None:
    """The holder of names this process serves: its task attempt, if it runs as one."""
    job, attempt = env.get("IRIS_JOB_ID"), env.get("IRIS_ATTEMPT_ID")
    index = env.get("IRIS_TASK_INDEX", "0")
    if not job or not attempt or not index.isdigit():
        return None
    return {"job": job, "task": int(index), "attempt": attempt}


def proof_from_env(env: Mapping[str, str]) -> str | None:
    """The proof of this process's attempt (None outside a task, or from an older
    controller that gave none)."""
    return env.get(PROOF_ENV) or None


def check_proof(name: str, proof: object) -> str | None:
    if proof is not None and (not isinstance(proof, str) or not 0 < len(proof) <= 256):
        raise InvalidRequestError(f"{name}: proof must be a non-empty string of at most 256 "
                                  "characters", "proof")
    return proof


def refuse_unproved(name: str, action: str, holders: Iterable[Holder], proof: str | None,
                    verify: Verify | None) -> None:
    """PermissionDeniedError unless `proof` proves each of `holders` that has an attempt
    (with no verifier, everything passes: a registry outside a controller)."""
    if verify is None:
        return
    for holder in holders:
        if holder.attempt and not verify(holder, proof):
            raise PermissionDeniedError(
                f"{action} {name}: the name is held by attempt {holder.attempt} of "
                f"{holder.job}[{holder.task}]; only that attempt may {action} it (its "
                f"${PROOF_ENV} was {'missing' if proof is None else 'wrong'})")


def refuse_shadow(name: str, holder: Holder, live: Iterable[_Entry],
                  verify: Verify | None) -> None:
    """PermissionDeniedError if `name` has a live `sole` entry (a spawned actor's) of
    another job than `holder`'s: a client resolving it must not be given another process.
    Only with a verifier (else `holder` is the caller's word)."""
    if verify is None:
        return
    for e in live:
        if e.sole and e.job != holder.job:
            raise PermissionDeniedError(
                f"register {name}: the name is job {e.job}'s spawned actor (at {e.address}); "
                "only that job's tasks may register it while it lives")


class Proofs:
    """A verifier that remembers the proof of each attempt holding names: a renewal a
    second a host compares it (~0.2 µs) rather than computing the HMAC again (~6 µs)."""

    def __init__(self, verify: Verify):
        self._verify = verify
        self._known: dict[str, tuple[tuple[str, int, str], str]] = {}  # attempt -> proved

    def proves(self, holder: Holder, proof: str | None) -> bool:
        known = self._known.get(holder.attempt)
        if known is not None and proof is not None and known[0] == holder[:3] \
                and hmac.compare_digest(known[1].encode(), proof.encode()):
            return True
        return self._verify(holder, proof)

    def remember(self, holder: Holder, proof: str) -> None:
        """`proof` proved `holder` (and the attempt holds names: `forget` when none)."""
        self._known[holder.attempt] = (holder[:3], proof)

    def forget(self, attempt: str) -> None:
        self._known.pop(attempt, None)


class _Entry(Protocol):
    registered_at: float
    expires_at: float
    address: str
    key: str
    job: str
    task: int
    attempt: str
    sole: bool


E = TypeVar("E", bound=_Entry)


def current_only(entries: list[E]) -> list[E]:
    """`entries` (one name's) without those a newer holder replaced; order kept."""
    first: dict[tuple[str, int, str], float] = {}  # each attempt's first registration
    sole_first: dict[str, float] = {}  # each job's first `sole` registration
    for e in entries:
        if e.job:
            key = (e.job, e.task, e.attempt)
            first[key] = min(first.get(key, e.registered_at), e.registered_at)
            if e.sole:
                sole_first[e.job] = min(sole_first.get(e.job, e.registered_at),
                                        e.registered_at)
    if len(first) < 2:
        return entries
    newest: dict[tuple[str, int], tuple[float, str]] = {}  # (job, task) -> newest attempt
    for (job, task, attempt), at in first.items():
        if (at, attempt) > newest.get((job, task), (float("-inf"), "")):
            newest[(job, task)] = (at, attempt)
    sole_job = max(sole_first, key=lambda j: (sole_first[j], j)) if sole_first else None
    return [e for e in entries if not e.job or (
        newest[(e.job, e.task)][1] == e.attempt and (not e.sole or e.job == sole_job))]


def takeover_wait(name: str, held: list[E], seen: dict[tuple[str, str], float],
                  now: float, deadline: float) -> float:
    """Pure: how long a spawned actor's registration of `name` waits for `held` (the entries
    it may not share) to go; 0.0 when none is left. `seen` keeps each entry's expiry when
    first met; one that outlived it was renewed, so its holder lives: ConflictError naming
    the name and the holder. So does a wait that would pass `deadline`."""
    if not held:
        return 0.0
    for e in held:
        seen.setdefault((e.address, e.key), e.expires_at)
    alive = [e for e in held if now >= seen[(e.address, e.key)]]
    until = min(seen[(e.address, e.key)] for e in held)
    if alive or until > deadline:
        e = (alive or held)[0]
        raise ConflictError(
            f"{name}: an actor is already registered under this name (job "
            f"{e.job or '(none: a process outside any task)'}, at {e.address}); stop it first "
            "(kill its job) or spawn under another name")
    return until - now


class Withdrawn:
    """Attempts whose names were withdrawn, remembered for `keep_s` (at most `limit`)."""

    def __init__(self, keep_s: float = WITHDRAWN_KEEP_S, limit: int = MAX_WITHDRAWN):
        self._keep_s = keep_s
        self._limit = limit
        self._order: deque[tuple[float, str]] = deque()
        self._ids: set[str] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, attempt: str, now: float) -> None:
        if attempt not in self._ids:
            self._ids.add(attempt)
            self._order.append((now, attempt))
        self._trim(now)

    def has(self, attempt: str, now: float) -> bool:
        self._trim(now)
        return attempt in self._ids

    def _trim(self, now: float) -> None:
        while self._order and (len(self._order) > self._limit
                               or self._order[0][0] <= now - self._keep_s):
            self._ids.discard(self._order.popleft()[1])
