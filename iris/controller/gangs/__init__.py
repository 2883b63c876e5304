"""Gangs, with one owner: multi-host jobs placed whole in one region, by two-phase reservation.

Modules: protocol (the reserve/commit/abort/release messages, and them as plain data through
the schema of wire/schema.py); ledger (one region's reservations, run by the Region actor); coordinator
(the pure two-phase state machine); tracking (the controller's rounds: hosts held, checks
before assigning, releases, region inventories); runner (the coordinator against the Region
actors, on its owner's turn: no thread of its own). Where a gang could go in a pass is the
scheduler's (scheduling/gang_placement.py).
"""

__all__: list[str] = []
