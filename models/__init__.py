"""models (filled in by a later issue)."""
