"""Progress events of turns and jobs, per session, with replay (SPEC section 7)."""
