"""Regions and autoscaling: the Region actor (region), its slice manager (scaler), the pure
autoscaler kernel (autoscaler), scale-group shapes (group_shapes), the demand routed to
each region (demand) and the host shapes a config can offer (capacity).
"""

__all__: list[str] = []
