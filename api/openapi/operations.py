"""What `GET /openapi.json` says about each route: one `Operation` per Flask endpoint name.

One table for every route, rather than a decorator on each view, because some views live in
modules this surface does not own (`/v1`, `/tools`) and one style beats two: the builder
(`api/openapi/document.py`) and the test that every route is documented read this same table.

Only what a route adds is declared here; the builder adds what follows from the app's own
rules, so it cannot drift from them: 401 for authenticated routes, 400/413 for routes with
a body, 429 for every route `api/rate_limits.py` charges (and the ones that create sessions
or open streams). `POST /tools/<name>` is one operation per registered tool, built from the
tool's own input and output models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from api.auth import LoginRequest, UserOut
from api.chat import ChatRequest
from api.health import Health
from api.instructor import HelpRequestList, Resolved, ReviewBody, ReviewList, ReviewOutcome
from api.judge import ActivityDetail, ActivityList, GenerateBody, GenerationStarted, RunBody, SubmitBody, SubmitResult
from api.openapi.models import FunctionList
from api.openapi.v1_models import ChatCompletion, ModelInfo, ModelList
from api.profile import Profile, ProfilePatch
from api.sessions import (
    CancelBody,
    Cancelled,
    MessagePage,
    SessionCreate,
    SessionDetail,
    SessionList,
    SessionRename,
)
from api.tool_results import ToolResultBody
from api.turns import TurnAnswer
from api.v1.routes import CompletionRequest
from judge.models import Verdict
from storage.problems import ProblemView
from storage.sessions import ChatSession

JSON = "application/json"
SSE = "text/event-stream"
HTML = "text/html"
IMAGE = "image/*"


@dataclass(frozen=True)
class Reply:
    """One declared answer: a model (JSON) or a media type whose body is not JSON."""

    description: str
    model: type[BaseModel] | None = None
    media: tuple[str, ...] = (JSON,)
    headers: tuple[str, ...] = ()  # response headers, from `HEADERS`
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # operationId -> its parameters from this answer


@dataclass(frozen=True)
class Param:
    """A query parameter or request header; `schema` is plain JSON Schema."""

    name: str
    where: Literal["query", "header"]
    schema: dict[str, object]
    description: str = ""


@dataclass(frozen=True)
class Operation:
    summary: str
    replies: dict[int, Reply]
    body: type[BaseModel] | None = None
    body_optional: bool = False
    multipart: bool = False  # POST /chat also takes multipart/form-data
    params: tuple[Param, ...] = ()
    auth: bool = True
    description: str = ""
    tag: str = ""  # default: from the endpoint's blueprint (`TAGS`)


HEADERS = {
    "Retry-After": "seconds until the limit lets one more request through",
    "X-Session-Id": "the session this turn was stored in (new unless the request named one)",
}

TAGS = {
    "auth": "auth",
    "chat": "chat",
    "tool_results": "chat",
    "sessions": "sessions",
    "streams": "sessions",
    "judge": "judge",
    "files": "files",
    "tools": "tools",
    "health": "health",
    "profile": "profile",
    "ui": "ui",
    "instructor": "instructor",
    "openai": "openai",
    "openapi": "reference",
}

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
TURN_STREAM = Reply(
    "the turn's events (SPEC 7) ending with `done` (this JSON) or `error`",
    TurnAnswer,
    media=(JSON, SSE),
    links=session_links("/session_id"),
)
TURN_FAILED = {
    409: Reply("the session is answering another turn (`turn_in_progress`, with its `turn_id`)"),
    500: Reply("the turn failed on the server (`internal_error`); stored rows are kept, `user_message_id` says which"),
    502: Reply("no provider answered (`provider_unavailable`)"),
    503: Reply("the database refused a write (`storage_unavailable`)"),
}
JUDGE_OFF = Reply("the Docker judge cannot run here or is switched off (`judge_unavailable`, with the reason)")
STAFF_ONLY = Reply("only instructors and admins (`forbidden`)")
EVENT_STREAM = Reply("server-sent events (SPEC 7): `id:`, `event:` and JSON `data:` lines", media=(SSE,))
LAST_EVENT_ID = (
    Param("Last-Event-ID", "header", {"type": "string"}, "resume after this event id (what EventSource sends)"),
    Param("last_event_id", "query", {"type": "string"}, "the same as the header, for clients that cannot set it"),
)

OPERATIONS: dict[str, Operation] = {
    "auth.login": Operation(
        "Trade an API token for a session cookie (the web UI's login)",
        auth=False,
        body=LoginRequest,
        replies={
            200: Reply("logged in; the answer sets an HttpOnly cookie", UserOut),
            401: Reply("no such token (`unauthorized`)"),
        },
    ),
    "auth.logout": Operation(
        "End the cookie session on the server", auth=False, replies={204: Reply("logged out", media=())}
    ),
    "auth.me": Operation("Who the token or cookie belongs to", replies={200: Reply("the user", UserOut)}),
    "chat.chat": Operation(
        "Send a message and get the turn's answer (JSON, or SSE with `Accept: text/event-stream`)",
        body=ChatRequest,
        multipart=True,
        description="Without `session_id` a new session is created. `retry_of` answers a stored user message again.",
        replies={200: TURN_STREAM, 404: NOT_FOUND, **TURN_FAILED},
    ),
    "tool_results.tool_result": Operation(
        "Answer an interactive widget (SPEC 8); the model's next pass runs",
        body=ToolResultBody,
        replies={
            200: TURN_STREAM,
            400: Reply("`INVALID_TOOL_RESULT`: the body or the value does not fit the call"),
            404: Reply("no such pending call of yours"),
            422: Reply("`PROFILE_UPDATE_FAILED`; the call stays open"),
            **TURN_FAILED,
            409: Reply("already answered, or the session is answering another turn"),
        },
    ),
    "judge.run": Operation(
        "Run files once in the Docker judge",
        body=RunBody,
        replies={200: Reply("the verdict", Verdict), 413: Reply("files over 1 MiB in total"), 503: JUDGE_OFF},
    ),
    "judge.submit": Operation(
        "Run a generated problem's hidden tests on a solution",
        body=SubmitBody,
        replies={
            200: Reply("the verdict per test (never the expected output)", SubmitResult),
            404: NOT_FOUND,
            413: Reply("files over 1 MiB in total"),
            503: JUDGE_OFF,
        },
    ),
    "judge.generate": Operation(
        "Generate practice problems (a job; follow its stream)",
        body=GenerateBody,
        replies={
            202: Reply("the job started", GenerationStarted),
            404: NOT_FOUND,
            409: Reply("the session is answering a turn (`turn_in_progress`)"),
            503: JUDGE_OFF,
        },
    ),
    "judge.activities": Operation(
        "The user's generated activities", replies={200: Reply("newest first", ActivityList)}
    ),
    "judge.activity": Operation(
        "One activity with its problems", replies={200: Reply("the activity", ActivityDetail), 404: NOT_FOUND}
    ),
    "judge.problem": Operation(
        "One problem (the learner's view)", replies={200: Reply("the problem", ProblemView), 404: NOT_FOUND}
    ),
    "sessions.index": Operation("The user's chat sessions", replies={200: Reply("newest first", SessionList)}),
    "sessions.create": Operation(
        "Create a chat session",
        body=SessionCreate,
        body_optional=True,
        replies={201: Reply("created", ChatSession, links=session_links("/id"))},
    ),
    "sessions.show": Operation(
        "One session, with its running turn", replies={200: Reply("the session", SessionDetail), 404: NOT_FOUND}
    ),
    "sessions.cancel": Operation(
        "Stop the running turn (SPEC 7a.5)",
        body=CancelBody,
        body_optional=True,
        replies={
            200: Reply("stopping; the turn ends with `done` and `stopped: true`", Cancelled),
            404: NOT_FOUND,
            409: Reply("no turn is running (`no_turn_in_progress`)"),
        },
    ),
    "sessions.rename": Operation(
        "Rename a session", body=SessionRename, replies={200: Reply("renamed", ChatSession), 404: NOT_FOUND}
    ),
    "sessions.delete": Operation(
        "Delete a session and its messages", replies={204: Reply("deleted", media=()), 404: NOT_FOUND}
    ),
    "sessions.messages": Operation(
        "A page of a session's messages, oldest first",
        replies={200: Reply("the page", MessagePage), 400: Reply("a bad `limit` or `before`"), 404: NOT_FOUND},
        params=(
            Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
            Param("before", "query", {"type": "integer", "minimum": 1}, "only messages with a smaller id"),
        ),
    ),
    "streams.progress": Operation(
        "Follow the session's running turn (or its last one) as SSE, with replay",
        params=(Param("turn_id", "query", {"type": "string"}, "follow this turn"), *LAST_EVENT_ID),
        replies={200: EVENT_STREAM, 404: NOT_FOUND},
    ),
    "streams.trace": Operation(
        "Every event of a session, never closing (only when TRACE_ENABLED=1, else 404)",
        params=LAST_EVENT_ID,
        replies={200: EVENT_STREAM, 404: Reply("no such session, or tracing is off")},
    ),
    "files.serve": Operation(
        "An uploaded or generated image (its owner only)",
        replies={200: Reply("the image", media=(IMAGE,)), 404: NOT_FOUND},
    ),
    "tools.index": Operation(
        "Every tool's OpenAI-compatible function schema", replies={200: Reply("the schemas", FunctionList)}
    ),
    "health.health": Operation(
        "The real state of the database, the providers and the judge",
        auth=False,
        replies={
            200: Reply("the database can be written", Health),
            503: Reply("the database cannot be written", Health),
        },
    ),
    "profile.show": Operation("The user's profile fields", replies={200: Reply("the profile", Profile)}),
    "profile.update": Operation(
        "Set fields (all or none); `null` removes one",
        body=ProfilePatch,
        replies={200: Reply("the profile after the change", Profile)},
    ),
    "ui.index": Operation("The chat web UI", auth=False, replies={200: Reply("the page", media=(HTML,))}),
    "instructor.help_requests": Operation(
        "Learners' help requests, oldest first",
        params=(Param("status", "query", {"type": "string", "enum": ["open", "resolved"]}),),
        replies={200: Reply("the requests", HelpRequestList), 400: Reply("a bad `status`"), 403: STAFF_ONLY},
    ),
    "instructor.resolve": Operation(
        "Mark a help request answered", replies={200: Reply("resolved", Resolved), 403: STAFF_ONLY, 404: NOT_FOUND}
    ),
    "instructor.reviews": Operation(
        "Attempts waiting for a manual review", replies={200: Reply("the attempts", ReviewList), 403: STAFF_ONLY}
    ),
    "instructor.review": Operation(
        "Approve or reject an attempt",
        body=ReviewBody,
        replies={
            200: Reply("reviewed", ReviewOutcome),
            403: STAFF_ONLY,
            404: NOT_FOUND,
            409: Reply("the learner's task is not waiting for review (`invalid_state`)"),
        },
    ),
    "openai.models": Operation(
        "OpenAI's model list: the one model, `orchestrator`", replies={200: Reply("the list", ModelList)}
    ),
    "openai.model": Operation(
        "One model", replies={200: Reply("the model", ModelInfo), 404: Reply("not `orchestrator` (`model_not_found`)")}
    ),
    "openai.chat_completions": Operation(
        "OpenAI's chat completion: one orchestrator turn (SPEC 11)",
        body=CompletionRequest,
        params=(Param("X-Session-Id", "header", {"type": "string"}, "store the turn in this session of yours"),),
        replies={
            200: Reply(
                "a `chat.completion`, or with `stream: true` `chat.completion.chunk` frames and `data: [DONE]`",
                ChatCompletion,
                media=(JSON, SSE),
                headers=("X-Session-Id",),
            ),
            400: Reply("a bad request, or client tools (`client_tools_unsupported`)"),
            404: Reply("an unknown model or session"),
            **TURN_FAILED,
        },
    ),
    "openapi.document": Operation(
        "This document (OpenAPI 3.1)", auth=False, replies={200: Reply("the document", media=(JSON,))}
    ),
    "openapi.docs": Operation(
        "A browsable reference of this document", auth=False, replies={200: Reply("the page", media=(HTML,))}
    ),
}

# endpoints not in the document: Flask's static files
UNDOCUMENTED = frozenset({"static"})

# every error answer of these blueprints is in OpenAI's shape (SPEC 11)
OPENAI_BLUEPRINTS = frozenset({"openai"})
