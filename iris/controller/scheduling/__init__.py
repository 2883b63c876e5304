"""Pure scheduling kernels: placement, gang reservation ledger and gang coordinator; no I/O.

Modules: constraints (EQ/NE/IN/EXISTS over worker attributes), model (bands, hosts,
pending tasks, gang shapes), reasons (why a task is pending), protocol (gang messages),
ledger (one region's reservations), coordinator (two-phase gang placement), scheduler
(one scheduling pass). Region and controller actors wrap these; nothing here touches a
socket, a thread or the clock.
"""

__all__: list[str] = []
