"""Jobs, tasks and attempts: submission validation, the pure job kernel, and its SQLite store.

No sockets here: the controller actor reads the clock, calls `kernel.handle`, commits the
`Persist` effect with `JobStore.apply`, and only then acts on the other effects.
"""

__all__ = ["env", "events", "kernel", "lifecycle", "model", "spec", "state", "store", "views"]
