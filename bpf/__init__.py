"""Kernel programs (X.bpf.c) and their user-space halves (X.py) side by side."""
