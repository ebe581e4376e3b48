"""envs (filled in by a later issue)."""
