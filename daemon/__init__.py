"""daemon (filled in by a later issue)."""
