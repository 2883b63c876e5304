"""Layer 2: the wire protocol (message kinds, envelope encode/decode) and the payload codec."""

__all__ = ["codec", "messages", "remote_errors"]
