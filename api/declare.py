"""What a route says about itself, declared on its view function beside the route.

    @bp.post("/run")
    @operation("Run files once in the Docker judge", body=RunBody, replies={200: Reply("the verdict", Verdict)})
    @budget("runs")
    def run() -> ResponseReturnValue: ...

`@operation(...)` is what `GET /openapi.json` says about the route: its summary, request body
model, query parameters and the answers the view itself gives. `@budget(...)` is what a request
to it spends of the user's `RATE_LIMITS` (SPEC 12). Both only attach a frozen value to the
function, so their order among the decorators does not matter. The readers find the view
through Flask (`app.view_functions[endpoint]`): the document builder (`api/openapi/document.py`)
and the hook that charges budgets (`api/rate_limits.py`). A route without an operation stops
the document from being built, and a test fails.

Only what a route adds is declared; the builder adds what follows from the app's own rules, so
it cannot drift from them: 401 for authenticated routes, 400/413 for routes with a body, 403
for changes made with the login cookie, 429 wherever a budget is declared or an event stream
answers. `POST /tools/<name>` declares `@one_operation_per_tool`: each registered tool is an
operation built from the tool's own models, and what a direct call costs is the tool's own
`Tool.budget`, set where the tool is declared.

This module imports only pydantic models, never a view module, so every view can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from api.openapi.models import ErrorBody

JSON = "application/json"
SSE = "text/event-stream"
HTML = "text/html"
IMAGE = "image/*"

HEADERS = {
    "Retry-After": "seconds until the limit lets one more request through, or to wait for a busy shared pool",
    "X-Session-Id": "the session this turn was stored in (new unless the request named one)",
}

# endpoints not in the document: Flask's static files (a view this app does not write)
UNDOCUMENTED = frozenset({"static"})

OPERATION_ATTRIBUTE = "openapi_operation"
BUDGET_ATTRIBUTE = "rate_limit_budget"

View = TypeVar("View", bound=Callable[..., Any])


@dataclass(frozen=True)
class Reply:
    """One declared answer: a model (JSON) or a media type whose body is not JSON."""

    description: str
    model: type[BaseModel] | None = None
    media: tuple[str, ...] = (JSON,)
    headers: tuple[str, ...] = ()  # response headers, from `HEADERS`
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # operationId -> its parameters from this answer
    event_data: Literal["json", "text"] = "json"  # an SSE event's `data`: SPEC 7's JSON, or `/v1`'s chunks and `[DONE]`


@dataclass(frozen=True)
class Param:
    """A query parameter or request header; `schema` is plain JSON Schema."""

    name: str
    where: Literal["query", "header"]
    schema: dict[str, object]
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One route in `GET /openapi.json`; its operationId is the Flask endpoint name."""

    summary: str
    replies: dict[int, Reply]
    body: type[BaseModel] | None = None
    body_optional: bool = False
    multipart: bool = False  # POST /chat also takes multipart/form-data
    params: tuple[Param, ...] = ()
    auth: bool = True
    description: str = ""
    tag: str = ""  # default: the endpoint's blueprint name
    error_model: type[BaseModel] = ErrorBody  # the shape of every error answer (`/v1` answers OpenAI's)


class OneOperationPerTool:
    """The declaration of `POST /tools/<name>`: one operation per registered tool."""


@dataclass(frozen=True)
class Budget:
    """What a request to a view spends of the user's `RATE_LIMITS` (SPEC 12).

    `charged` is spent by the `before_request` hook once the user is known, before the body is
    read: a budget name, or a function of the route's arguments that names one (or None: free).
    `by_view` names budgets the view spends itself, where only it knows (a new session, a login).
    """

    charged: str | Callable[..., str | None] | None = None
    by_view: tuple[str, ...] = ()

    def charged_for(self, view_args: dict[str, Any] | None) -> str | None:
        if callable(self.charged):
            return self.charged(**(view_args or {}))
        return self.charged


def _declare(attribute: str, value: object) -> Callable[[View], View]:
    def declare(view: View) -> View:
        setattr(view, attribute, value)
        return view

    return declare


def operation(
    summary: str,
    *,
    replies: dict[int, Reply],
    body: type[BaseModel] | None = None,
    body_optional: bool = False,
    multipart: bool = False,
    params: tuple[Param, ...] = (),
    auth: bool = True,
    description: str = "",
    tag: str = "",
    error_model: type[BaseModel] = ErrorBody,
) -> Callable[[View], View]:
    """Declare the view's OpenAPI operation (see `Operation`)."""
    declared = Operation(summary, replies, body, body_optional, multipart, params, auth, description, tag, error_model)
    return _declare(OPERATION_ATTRIBUTE, declared)


def one_operation_per_tool(view: View) -> View:
    """Declare that the view is documented as one operation per registered tool."""
    return _declare(OPERATION_ATTRIBUTE, OneOperationPerTool())(view)


def budget(
    charged: str | Callable[..., str | None] | None = None, *, by_view: tuple[str, ...] = ()
) -> Callable[[View], View]:
    """Declare what a request to the view spends (see `Budget`)."""
    return _declare(BUDGET_ATTRIBUTE, Budget(charged, by_view))


def operation_of(view: Callable[..., Any] | None) -> Operation | OneOperationPerTool | None:
    declared = getattr(view, OPERATION_ATTRIBUTE, None)
    return declared if isinstance(declared, Operation | OneOperationPerTool) else None


def budget_of(view: Callable[..., Any] | None) -> Budget | None:
    declared = getattr(view, BUDGET_ATTRIBUTE, None)
    return declared if isinstance(declared, Budget) else None


# answers several views give --------------------------------------------------------------------

SESSION_OPERATIONS = (
    "sessions.show",
    "sessions.rename",
    "sessions.delete",
    "sessions.messages",
    "sessions.cancel",
    "streams.progress",
)


def session_links(pointer: str) -> dict[str, dict[str, str]]:
    """OpenAPI links from an answer that names a session (`pointer` into its JSON) to the
    operations on that session: clients and fuzzers follow them with a real id."""
    return {operation: {"session_id": f"$response.body#{pointer}"} for operation in SESSION_OPERATIONS}


NOT_FOUND = Reply("no such thing, or not yours (the same answer for both)")
TURN_FAILED = {
    409: Reply("the session is answering another turn (`turn_in_progress`, with its `turn_id`)"),
    500: Reply("the turn failed on the server (`internal_error`); stored rows are kept, `user_message_id` says which"),
    502: Reply("no provider answered (`provider_unavailable`)"),
    503: Reply("the database refused a write (`storage_unavailable`)"),
}
EVENT_STREAM = Reply("server-sent events (SPEC 7): `id:`, `event:` and JSON `data:` lines", media=(SSE,))
LAST_EVENT_ID = (
    Param("Last-Event-ID", "header", {"type": "string"}, "resume after this event id (what EventSource sends)"),
    Param("last_event_id", "query", {"type": "string"}, "the same as the header, for clients that cannot set it"),
)
