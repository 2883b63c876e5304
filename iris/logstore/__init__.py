"""logstore layer."""
