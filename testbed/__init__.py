"""testbed (filled in by a later issue)."""
