"""datasets (filled in by a later issue)."""
