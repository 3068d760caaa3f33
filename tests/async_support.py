"""Running a test's coroutine, whatever ran before it in this process.

pytest-playwright keeps one sync Playwright open for the whole session, and sync Playwright
leaves an asyncio loop marked as running in the main thread, so `asyncio.run` or `anyio.run`
there refuses ("Cannot run the event loop while another loop is running") once a browser test
has run. Under pytest-xdist (scripts/test.sh) a worker may take a browser module before any
other, so tests run their coroutines here: in a thread of its own, where no loop runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def run_async(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`anyio.run(function, *args)` in a fresh thread; returns its result or raises its error."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-async") as thread:
        return thread.submit(anyio.run, function, *args).result()
