"""The Flask (WSGI) app on a bounded thread pool, called from the event loop in one hop.

A general ASGI-to-WSGI adapter crosses threads for every message: the request body is
pulled from the worker thread through the loop, and the status line, each body chunk and
the end are pushed back one by one, the thread waiting for the loop each time. A turn paid
five such round trips, each a task, a future and two thread switches fighting over the GIL
with the turn itself (`bench/turn_overhead.py` measured them). Here a request costs one
hop each way:

- the loop reads the first part of the body before the app runs (a request of ordinary
  size arrives whole in it); only a larger body is pulled from the thread, part by part,
  so an upload is never held in memory by the bridge. A client that sent
  `Expect: 100-continue` gets its `100 Continue` only when the app reads the body: a
  request refused before (a wrong token, a size over the limit) answers at once and the
  client never uploads (the connection is then closed: the unsent body would stand where
  the next request's head should);
- the thread runs the app and gathers its answer, up to `BATCH_BYTES` of body, into one
  `WsgiAnswer`; the loop writes it. A longer body (a file download) comes in further
  batches, each asked for when the previous one is written (the client's pace); an event
  stream is handed on chunk by chunk, as it is produced.

The environ follows PEP 3333, with the ASGI scope under `asgi.scope` (the hand-off slot of
`serving.asgi` travels in it). It says `wsgi.input_terminated`, so a body sent with
`Transfer-Encoding: chunked` is read (bounded by the app's MAX_CONTENT_LENGTH) instead of
being taken for an empty one.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from api.live import ASGIMessage, Receive, Send, watching_client

BATCH_BYTES = 256 * 1024  # response body gathered by the thread before the loop writes it
WsgiApp = Callable[[dict[str, Any], Callable[..., Callable[[bytes], None]]], Iterable[bytes]]


class RequestBody:
    """`wsgi.input`: the part the loop has read, then more parts pulled from the loop.

    Read from the worker thread only. The further parts are received in a context of their
    own: a `receive` started from the thread would otherwise run in a copy of the thread's
    context (inside Flask's app and request contexts), and uvicorn, resuming the socket's
    reads there, would start every later request on that keep-alive connection inside the
    old request's contexts (found by the OpenAPI fuzzer, `tests/api/test_openapi_fuzz.py`).
    """

    def __init__(self, first: ASGIMessage, loop: asyncio.AbstractEventLoop, receive: Receive) -> None:
        self._buffer = bytearray(first.get("body", b""))
        self._more = bool(first.get("more_body", False))
        self._loop = loop
        self._receive = receive
        self.pulled = False  # a part was pulled from the thread (for `Expect: 100-continue`, the first)

    def _pull(self) -> None:
        """Append the next part of the body (the end of it when the client went away)."""
        arrived: Future[ASGIMessage] = Future()

        async def received() -> ASGIMessage:
            return await self._receive()

        def start() -> None:
            task: asyncio.Task[ASGIMessage] = self._loop.create_task(received())
            task.add_done_callback(lambda done: _settle(arrived, done))

        self._loop.call_soon_threadsafe(start, context=contextvars.Context())
        self.pulled = True
        message = arrived.result()
        if message.get("type") != "http.request":  # http.disconnect: nothing more will come
            self._more = False
            return
        self._buffer += message.get("body", b"")
        self._more = bool(message.get("more_body", False))

    def read(self, size: int = -1) -> bytes:
        while self._more and (size < 0 or len(self._buffer) < size):
            self._pull()
        return self._take(len(self._buffer) if size < 0 else min(size, len(self._buffer)))

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self._buffer.find(b"\n", 0, limit if limit >= 0 else None)
            if end >= 0:
                return self._take(end + 1)
            if limit >= 0 and len(self._buffer) >= limit:
                return self._take(limit)
            if not self._more:
                return self._take(len(self._buffer))
            self._pull()

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken


UNREAD: ASGIMessage = {"type": "http.request", "body": b"", "more_body": True}  # nothing received yet


def expects_continue(scope: dict[str, Any]) -> bool:
    """The client sent `Expect: 100-continue` with a body: it sends the body only once told to."""
    headers = {name: value.lower() for name, value in scope.get("headers", ())}
    announced = headers.get(b"content-length", b"0").strip() != b"0" or b"transfer-encoding" in headers
    return headers.get(b"expect") == b"100-continue" and announced


def _settle(future: Future[ASGIMessage], task: asyncio.Task[ASGIMessage]) -> None:
    if task.cancelled():
        future.set_result({"type": "http.disconnect"})
        return
    error = task.exception()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def _succeed(future: asyncio.Future[WsgiAnswer], answer: WsgiAnswer) -> None:
    if not future.done():  # not when the request's task was cancelled meanwhile
        future.set_result(answer)


def _fail(future: asyncio.Future[WsgiAnswer], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def wsgi_environ(scope: dict[str, Any], body: RequestBody) -> dict[str, Any]:
    """The WSGI environ of one ASGI request (paths as PEP 3333's bytes-as-latin-1 strings)."""
    script_name = scope.get("root_path", "").encode("utf8").decode("latin1")
    path_info = scope["path"].encode("utf8").decode("latin1")
    if script_name and path_info.startswith(script_name):
        path_info = path_info[len(script_name) :]
    server_name, server_port = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "asgi.scope": scope,
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path_info,
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "SERVER_NAME": server_name,
        "SERVER_PORT": str(server_port or 0),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.input_terminated": True,  # it ends where the body ends, chunked or not: werkzeug may
        # then read a body sent without Content-Length, within MAX_CONTENT_LENGTH
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.get("client")
    if client is not None:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = client[0], str(client[1])
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin1").upper().replace("-", "_")
        key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"
        value = raw_value.decode("latin1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


@dataclass
class WsgiAnswer:
    """What the app answered so far: its status line and headers, and a batch of its body.
    `rest` is the body still to come (None when `chunks` is all of it)."""

    status: int = 500
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    rest: Iterator[bytes] | None = None
    streaming: bool = False  # an event stream: hand each chunk on as it is made
    closer: Callable[[], object] | None = None
    context: contextvars.Context = field(default_factory=contextvars.Context)  # the request's own
    # (the app and every later batch run in it, whichever worker thread takes them)

    @property
    def start(self) -> ASGIMessage:
        return {"type": "http.response.start", "status": self.status, "headers": self.headers}

    def close(self) -> None:
        """Close the app's body iterable (PEP 3333): runs its clean-up, e.g. a stream's."""
        if self.closer is not None:
            closer, self.closer = self.closer, None
            closer()


def call_app(app: WsgiApp, environ: dict[str, Any], answer: WsgiAnswer) -> WsgiAnswer:
    """Run the app on this (worker) thread, in `answer.context`; its answer with the first
    batch of its body."""

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        answer.status = int(status.split(" ", 1)[0])
        answer.headers = [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers]
        answer.streaming = any(
            name == b"content-type" and value.startswith(b"text/event-stream") for name, value in answer.headers
        )
        return answer.chunks.append  # the legacy `write` callable

    iterable = app(environ, start_response)
    answer.closer = getattr(iterable, "close", None)
    answer.rest = iter(iterable)
    next_batch(answer)
    return answer


def next_batch(answer: WsgiAnswer) -> WsgiAnswer:
    """Gather the next batch of the body into `answer.chunks` (worker thread); close the
    iterable at its end."""
    assert answer.rest is not None
    size = sum(len(chunk) for chunk in answer.chunks)
    try:
        for chunk in answer.rest:
            if chunk:
                answer.chunks.append(chunk)
                size += len(chunk)
            if size >= BATCH_BYTES or (answer.streaming and size):
                return answer
        answer.rest = None
    except BaseException:
        answer.rest = None
        answer.close()
        raise
    answer.close()
    return answer


class WsgiBridge:
    """Calls a WSGI app for ASGI HTTP requests, on `threads` worker threads."""

    def __init__(self, app: WsgiApp, *, threads: int) -> None:
        self.app = app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="WSGI")

    async def answer(
        self, scope: dict[str, Any], receive: Receive, ready: Callable[[], Future[Any] | None] = lambda: None
    ) -> WsgiAnswer:
        """Run the app for this request: its status, headers and first batch of body.

        `ready` is asked on the worker thread once the app has answered: a future it returns
        must be done before the loop takes the answer (a view whose body waits for a turn's
        end). The loop is then woken once, when the answer can be written, not also when the
        thread is done with the view: a wake-up is a thread switch that contends for the GIL
        with the turn starting at that very moment.
        """
        loop = asyncio.get_running_loop()
        # uvicorn sends `100 Continue` at the first `receive`: for a client that waits for it,
        # that is once the app reads the body, so a request refused first (401, 413) is never sent
        waits = expects_continue(scope)
        body = RequestBody(UNREAD if waits else await receive(), loop, receive)
        answer = WsgiAnswer()
        environ = wsgi_environ(scope, body)
        taken: asyncio.Future[WsgiAnswer] = loop.create_future()

        def run() -> None:
            try:
                answer.context.run(call_app, self.app, environ, answer)
                if waits and not body.pulled:  # the client holds its body back: the connection
                    answer.headers.append((b"connection", b"close"))  # cannot carry another request
                gate = ready()
            except BaseException as error:  # the loop re-raises it in the request's task
                loop.call_soon_threadsafe(_fail, taken, error)
                return
            if gate is None:
                loop.call_soon_threadsafe(_succeed, taken, answer)
            else:
                gate.add_done_callback(lambda _: loop.call_soon_threadsafe(_succeed, taken, answer))

        self.executor.submit(run)
        return await taken

    async def write(self, answer: WsgiAnswer, send: Send, receive: Receive) -> None:
        """Send the answer, asking the thread for each further batch once the last is written
        (and stopping, the body closed, when the client goes away in between)."""
        await send(answer.start)
        if answer.rest is None:
            await send({"type": "http.response.body", "body": b"".join(answer.chunks), "more_body": False})
            return
        loop = asyncio.get_running_loop()
        try:
            async with watching_client(receive) as client:
                while answer.rest is not None and not client.gone:
                    if answer.chunks:
                        data, answer.chunks = b"".join(answer.chunks), []
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                    await loop.run_in_executor(self.executor, answer.context.run, next_batch, answer)
                await send({"type": "http.response.body", "body": b"".join(answer.chunks), "more_body": False})
        finally:
            if answer.closer is not None:  # not read to its end: the client went away
                await loop.run_in_executor(self.executor, answer.context.run, answer.close)
