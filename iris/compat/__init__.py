"""Layer 5, above iris.backends: shapes of other frameworks' APIs over `iris.*`.

`from iris.compat import ray` gives a Ray-shaped module for porting a Ray program
mechanically (see docs/migrating-from-ray.md).
"""

from iris.compat import ray

__all__ = ["ray"]
