"""Task logs in object storage: the encoding and layout (model), the sinks (local directory
and GCS), the worker-side shipper, and the reader behind `job.logs()` and `iris job logs`.
"""

__all__ = ["buffer", "config", "errors", "gcs", "model", "reader", "shipper", "sinks"]
