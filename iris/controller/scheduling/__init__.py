"""Pure scheduling kernels: placement and preemption; no I/O.

Modules: constraints (EQ/NE/IN/EXISTS over worker attributes), model (bands, hosts,
pending tasks, gang shapes), reasons (why a task is pending), fleet, preemption,
gang_placement (a pass's gangs: GangSteps, and where a gang could go), scheduler (one scheduling pass). The
gang reservation itself is in controller/gangs/. Nothing here touches a socket, a thread
or the clock.
"""

__all__: list[str] = []
