"""Loopback stand-ins for outside services, shared by tests and benchmarks."""
