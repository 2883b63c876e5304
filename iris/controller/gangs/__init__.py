"""Gangs, with one owner: multi-host jobs placed whole in one region, by two-phase reservation.

Modules: protocol (the reserve/commit/abort/release messages, and them as plain data through
the schema of wire/schema.py); ledger (one region's reservations, run by the Region actor);
tracking (the service's gangs object, pure: one record per placement round from the
scheduler's ask to the release of its hosts, the two-phase reservation and its timers, hosts
held, checks before assigning, typed requests out as SendRegion effects, replies in as
events, rounds placed settled into Assign events);
inventory (each region's inventory kept between pushes, by RegionPushes:
controller/region_pushes.py). Where a gang could go in a pass is the scheduler's
(scheduling/gang_placement.py); carrying the requests is the Controller actor's
(regions/region.py's RegionCarrier), which makes frames of them only for a Region in another
process.
"""

__all__: list[str] = []
