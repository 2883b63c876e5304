"""actors layer."""
