"""Layer 1: time, ids, errors and resource specs. No I/O, imports nothing else of Iris."""

__all__: list[str] = []
