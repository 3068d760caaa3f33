"""Who counts as course staff: the roles that may review attempts, resolve help requests and
write comments every learner sees (SPEC section 10). Written once, read by the instructor
API and the task tools."""

from __future__ import annotations

STAFF_ROLES = ("instructor", "admin")


def is_staff(role: str) -> bool:
    """True for an instructor or an admin."""
    return role in STAFF_ROLES
