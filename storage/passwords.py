"""Password hashing (SPEC 17) with argon2-cffi, and a bound on how many hashes run at once.

An argon2id hash with the library's default parameters takes about 64 MiB of memory and tens
of milliseconds of CPU, on purpose. Unbounded, a flood of logins (wrong ones cost as much as
right ones) would take a process's memory and both cores: `Passwords` lets at most
`HASHES_AT_ONCE` run in a process (one core stays free for everyone else's requests), and a
hash that finds no free place raises `Busy` at once (503 with `Retry-After`): no request
thread ever waits for a place, so a flood of logins cannot hold the web threads that other
users' requests need.

A login with an unknown name is verified against `dummy_hash`, a hash of a random password
made once, so it costs what a known name costs and answers the same (no user enumeration).
A stored hash made with other parameters than the current ones is rehashed at the next
successful login (`check_needs_rehash`).

The password policy lives here too, so the HTTP API and the CLI refuse the same passwords:
at least `MIN_CHARS` characters, at most `MAX_BYTES` bytes of UTF-8 (argon2 accepts far more,
but a megabyte password is a denial of service, not a password).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from foundation.fair_share import Busy, FairGate

# x 64 MiB: the most memory logins can hold at once; a core stays free for every other request
HASHES_AT_ONCE = max(1, min(4, (os.cpu_count() or 2) - 1))
WAIT_S = 0.0  # a login never waits for a place: it answers "busy" at once
CLEAN_PLACES = 1  # kept for callers without failures (the account's owner during a flood of guesses)
MIN_CHARS = 8
MAX_BYTES = 1024

T = TypeVar("T")


def password_problem(password: str) -> str | None:
    """What is wrong with `password` under the policy, or None."""
    if len(password) < MIN_CHARS:
        return f"a password has at least {MIN_CHARS} characters"
    if len(password.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return f"a password has at most {MAX_BYTES} bytes"
    return None


class Passwords:
    """argon2 hashing in `slots` places, plus `CLEAN_PLACES` kept for callers with a clean record.

    A caller with no failed sign-in behind it (`clean`: a signed-in user, an address that never
    guessed wrong) may also take a place of its own, which nobody with failures can hold: so a
    flood of wrong guesses, each answered 503 at once when the shared places are full, never
    keeps the account's owner out, and still costs at most `slots` cores."""

    def __init__(
        self,
        hasher: PasswordHasher | None = None,
        slots: int = HASHES_AT_ONCE,
        wait_s: float = WAIT_S,
        clean_places: int = CLEAN_PLACES,
    ):
        self.hasher = hasher or PasswordHasher()
        self.gate = FairGate(slots)
        self.clean_gate = FairGate(clean_places) if clean_places > 0 else None
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._running = 0
        self.peak_running = 0  # the most hashes that ever ran at once (tests and the operator)
        self.hashes = 0  # hashes and verifications run, in all
        self._dummy: str | None = None

    @property
    def places(self) -> int:
        return self.gate.capacity + (self.clean_gate.capacity if self.clean_gate else 0)

    def hash(self, password: str, key: Hashable) -> str:
        return self._gated(key, lambda: self.hasher.hash(password), clean=True)

    def verify(
        self, stored: str | None, password: str, key: Hashable, *, clean: bool = True
    ) -> tuple[bool, str | None]:
        """Whether `password` matches `stored` (None: no such user or no password, checked
        against the dummy hash all the same), and a new hash when the stored one's
        parameters are out of date. `clean`: the caller has no failed attempt behind it."""
        target = stored if stored is not None else self.dummy_hash()

        def check() -> tuple[bool, str | None]:
            try:
                self.hasher.verify(target, password)
            except (VerificationError, InvalidHashError):
                return False, None
            if stored is None:
                return False, None
            return True, (self.hasher.hash(password) if self.hasher.check_needs_rehash(stored) else None)

        return self._gated(key, check, clean=clean)

    def dummy_hash(self) -> str:
        with self._lock:
            if self._dummy is None:
                self._dummy = self.hasher.hash(secrets.token_urlsafe(16))
            return self._dummy

    def running(self) -> int:
        with self._lock:
            return self._running

    def _place(self, key: Hashable, clean: bool) -> FairGate | None:
        """A free place now: a shared one, else (for a clean caller) a kept one; None: busy."""
        until = time.monotonic() + self.wait_s
        if self.gate.acquire(key, until):
            return self.gate
        if clean and self.clean_gate is not None and self.clean_gate.acquire(key, until):
            return self.clean_gate
        return None

    def _gated(self, key: Hashable, work: Callable[[], T], *, clean: bool) -> T:
        gate = self._place(key, clean)
        if gate is None:
            raise Busy("too many sign-ins are being checked at once; retry shortly")
        try:
            with self._lock:
                self._running += 1
                self.hashes += 1
                self.peak_running = max(self.peak_running, self._running)
            try:
                return work()
            finally:
                with self._lock:
                    self._running -= 1
        finally:
            gate.release(key)
