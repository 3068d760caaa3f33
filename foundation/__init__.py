"""Dependency-free helpers used by every floor: cancellation and deadlines, surrogate-safe text,
the workspace's line rule. This package imports nothing of the product (a test holds it to that)."""
