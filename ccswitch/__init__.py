"""ccswitch: per-socket congestion-control switching on Linux."""
__version__ = "0.1.0"
